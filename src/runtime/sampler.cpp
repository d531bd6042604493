#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "util/error.h"

namespace nibble {


Sampler::Sampler(const SamplerConfig& c) : config_(c), state_(c.seed) {
  if (!(c.temperature >= 0) || !std::isfinite(c.temperature)) fail("--temp must be >= 0, got ", c.temperature);
  if (c.top_k < 0) fail("--top-k must be >= 0, got ", c.top_k);
  if (!(c.top_p > 0 && c.top_p <= 1)) fail("--top-p must be in (0, 1], got ", c.top_p);
  if (!(c.min_p >= 0 && c.min_p <= 1)) fail("--min-p must be in [0, 1], got ", c.min_p);
  if (!(c.repetition_penalty > 0) || !std::isfinite(c.repetition_penalty))
    fail("--repeat-penalty must be > 0, got ", c.repetition_penalty);
  if (!(c.presence_penalty >= -2 && c.presence_penalty <= 2))
    fail("--presence-penalty must be in [-2, 2], got ", c.presence_penalty);
  if (!(c.frequency_penalty >= -2 && c.frequency_penalty <= 2))
    fail("--frequency-penalty must be in [-2, 2], got ", c.frequency_penalty);
}

bool Sampler::has_penalties() const {
  return config_.repetition_penalty != 1.0f || config_.presence_penalty != 0.0f || config_.frequency_penalty != 0.0f;
}

void Sampler::record(int32_t id) {
  if (has_penalties()) ++generated_[id];
}

std::vector<float> Sampler::penalized(const float* logits, int64_t vocab, std::span<const int32_t> context) const {
  std::vector<float> out(logits, logits + vocab);
  auto in_vocab = [&](int32_t id) { return id >= 0 && int64_t(id) < vocab; };
  if (config_.repetition_penalty != 1.0f) {
    // Each token once, however often it occurs (transformers gathers the
    // scores of the sequence's ids and scatters the new ones back). Applied
    // to the original logit, so a repeated id is not penalised twice.
    const float rp = config_.repetition_penalty;
    auto apply = [&](int32_t id) {
      if (!in_vocab(id)) return;
      const float x = logits[id];
      out[size_t(id)] = x < 0 ? x * rp : x / rp;
    };
    for (int32_t id : context) apply(id);
    for (const auto& [id, n] : generated_) apply(id);
  }
  for (const auto& [id, n] : generated_) {
    if (!in_vocab(id)) continue;
    out[size_t(id)] -= config_.frequency_penalty * float(n) + config_.presence_penalty;
  }
  return out;
}

double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);  // 53 random bits
}

DrawParams Sampler::draw_settings(int64_t vocab) const {
  DrawParams p;
  p.temperature = config_.temperature;
  p.top_k = config_.top_k;
  p.top_p = config_.top_p;
  p.min_p = config_.min_p;
  p.vocab = vocab;
  return p;
}

DrawParams Sampler::next_draw() {
  DrawParams p = draw_settings(config_.vocab_limit);
  if (p.temperature != 0) p.u = next_uniform();
  return p;
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(const float* logits, int64_t vocab) const {
  return distribution(logits, vocab, config_.context);
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(const float* logits, int64_t vocab,
                                                              std::span<const int32_t> context) const {
  if (config_.vocab_limit > 0) vocab = std::min(vocab, config_.vocab_limit);
  if (!has_penalties()) return distribution_of(logits, vocab);
  const std::vector<float> p = penalized(logits, vocab, context);
  return distribution_of(p.data(), vocab);
}

std::vector<std::pair<int32_t, double>> Sampler::distribution_of(const float* logits, int64_t vocab) const {
  return token_distribution(logits, vocab, config_.temperature, config_.top_k, config_.top_p, config_.min_p);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) { return sample(logits, vocab, config_.context); }

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> context) {
  if (config_.vocab_limit > 0) vocab = std::min(vocab, config_.vocab_limit);
  std::vector<float> pen;
  if (has_penalties()) {
    pen = penalized(logits, vocab, context);
    logits = pen.data();
  }
  // One rule for every sampler and backend (kernels/token_draw.h); u is
  // drawn only when it is used, so greedy runs leave the stream alone.
  DrawParams p = draw_settings(vocab);
  if (p.temperature != 0) p.u = next_uniform();
  const int32_t id = draw_token(logits, vocab, p);
  record(id);
  if (config_.observe) config_.observe(logits, vocab, id);
  return id;
}

}  // namespace nibble
