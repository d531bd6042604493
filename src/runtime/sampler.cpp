#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>

#include "util/error.h"

namespace nibble {

namespace {

// Stable LSD radix sort of 64-bit keys by their upper 32 bits (3 passes of 11 bits).
void radix_sort_upper32(std::vector<uint64_t>& v) {
  std::vector<uint64_t> tmp(v.size());
  for (int shift = 32; shift < 64; shift += 11) {
    const int bits = std::min(11, 64 - shift);
    const size_t buckets = size_t(1) << bits;
    const uint64_t mask = buckets - 1;
    std::vector<size_t> count(buckets + 1, 0);
    for (uint64_t x : v) ++count[((x >> shift) & mask) + 1];
    for (size_t b = 0; b < buckets; ++b) count[b + 1] += count[b];
    for (uint64_t x : v) tmp[count[(x >> shift) & mask]++] = x;
    v.swap(tmp);
  }
}

}  // namespace

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

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
  std::vector<std::pair<int32_t, double>> out;
  if (config_.temperature == 0) {
    out.push_back({argmax(logits, vocab), 1.0});
    return out;
  }
  // Candidates sorted by logit, highest first (lower id first on ties). One
  // 64-bit key per token, (order-reversed logit bits << 32) | id, in id order,
  // then a stable radix sort on the upper half: the same order as a stable
  // sort by logit, ~4x faster at DeepSeek's 129k-id vocabulary (where the
  // comparison sort took ~10 ms a token).
  std::vector<uint64_t> keys(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    const float f = logits[i] == 0.0f ? 0.0f : logits[i];  // -0 ties with +0
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // float order as unsigned
    keys[size_t(i)] = (uint64_t(~ascending) << 32) | uint64_t(uint32_t(i));
  }
  radix_sort_upper32(keys);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (size_t i = 0; i < keys.size(); ++i) ids[i] = int32_t(uint32_t(keys[i]));
  size_t keep = ids.size();
  if (config_.top_k > 0) {
    // Like HF, ties with the k-th logit are kept too.
    size_t k = std::min<size_t>(size_t(config_.top_k), keep);
    float kth = logits[ids[k - 1]];
    while (k < keep && logits[ids[k]] == kth) ++k;
    keep = k;
  }
  const double inv_t = 1.0 / config_.temperature;
  const double top = double(logits[ids[0]]) * inv_t;
  std::vector<double> p(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp(double(logits[ids[i]]) * inv_t - top));
  for (auto& v : p) v /= sum;
  if (config_.top_p < 1) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < config_.top_p) mass += p[n++];
    keep = std::max<size_t>(n, 1);
  }
  if (config_.min_p > 0) {
    double floor = config_.min_p * p[0];
    size_t n = 0;
    while (n < keep && p[n] >= floor) ++n;
    keep = std::max<size_t>(n, 1);
  }
  sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i];
  for (size_t i = 0; i < keep; ++i) out.push_back({ids[i], p[i] / sum});
  return out;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) { return sample(logits, vocab, config_.context); }

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> context) {
  if (config_.vocab_limit > 0) vocab = std::min(vocab, config_.vocab_limit);
  std::vector<float> pen;
  if (has_penalties()) {
    pen = penalized(logits, vocab, context);
    logits = pen.data();
  }
  int32_t id = -1;
  if (config_.temperature == 0) {
    id = argmax(logits, vocab);
  } else {
    auto dist = distribution_of(logits, vocab);
    double u = next_uniform(), acc = 0;
    for (const auto& [cand, prob] : dist) {
      acc += prob;
      if (u < acc) {
        id = cand;
        break;
      }
    }
    if (id < 0) id = dist.back().first;
  }
  record(id);
  if (config_.observe) config_.observe(logits, vocab, id);
  return id;
}

}  // namespace nibble
