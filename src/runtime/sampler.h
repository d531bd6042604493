// Next-token sampling: greedy, or temperature + top-k + top-p + min-p with a
// seeded generator, applied in Hugging Face's order (temperature, top-k,
// top-p, min-p) so that the same settings mean the same thing as there.
//
// Penalties come first, on the raw logits (as in transformers and vLLM):
// repetition_penalty as transformers' RepetitionPenaltyLogitsProcessor (the
// logit of every token in the sequence so far, context and generated, is
// divided by the penalty when positive and multiplied by it when negative),
// then presence and frequency penalties as OpenAI and vLLM define them (from
// each generated token's logit subtract presence_penalty once and
// frequency_penalty times the number of times it was generated).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/token_draw.h"

namespace nibble {

struct SamplerConfig {
  float temperature = 1.0f;  // 0 = greedy (argmax; ties -> lowest id)
  int64_t top_k = 0;         // keep the k most likely; 0 = off
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p; 1 = off
  float min_p = 0.0f;        // drop tokens below min_p * max prob; 0 = off
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;  // > 0; 1 = off; over context + generated tokens
  float presence_penalty = 0.0f;    // in [-2, 2] like OpenAI's; 0 = off; generated tokens only
  float frequency_penalty = 0.0f;   // in [-2, 2]; 0 = off; generated tokens only
  // The tokens before generation (prompt, or the whole conversation) that
  // repetition_penalty also covers.
  std::vector<int32_t> context;
  // Only ids below this are drawn (0: every id of the logits). The Engine
  // sets it to the tokenizer's id range: gpt-oss's head has 201,088 rows but
  // its tokenizer names ids up to 200,018 only, and a token with no text
  // could not be shown nor fed back as text.
  int64_t vocab_limit = 0;
  // Called by sample() with the logits it drew from (penalties applied,
  // before temperature and the filters) and the id it returned; for
  // per-token log-probabilities (`nibble run --json --n-probs`).
  std::function<void(const float* logits, int64_t vocab, int32_t chosen)> observe;
};

class Sampler {
 public:
  // Throws nibble::Error for settings outside their range (naming the flag).
  explicit Sampler(const SamplerConfig& config);

  // Draws the next token and records it as generated (the penalties of
  // later calls count it).
  int32_t sample(const float* logits, int64_t vocab);
  // The same with `context` in place of config().context (a caller that
  // keeps the sequence's tokens itself, like the Engine).
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> context);

  // Records a generated token without sampling (what sample() does with its
  // result); for callers that pick a token themselves, and tests.
  void record(int32_t id);

  // Drawing where the logits are (a GPU backend; SeqStep::draw), so that
  // only the id crosses to the host: possible when nothing needs the logits
  // here (no penalties, no observer). next_draw() is what sample() would
  // draw with, u included (the stream advances the same way: the tokens are
  // sample()'s); record() the id that comes back.
  bool draws_on_backend() const { return !has_penalties() && !config_.observe; }
  DrawParams next_draw();
  // The random stream's position, and a return to one: a caller that draws
  // with next_draw() ahead of a step that may fail puts the stream back
  // (only next_draw() moves it before record(); the counts stay).
  uint64_t stream_position() const { return state_; }
  void rewind_stream(uint64_t position) { state_ = position; }

  // The distribution sample() draws from: (id, probability) of every token
  // that survives the filters, probabilities summing to 1. Exposed for tests.
  std::vector<std::pair<int32_t, double>> distribution(const float* logits, int64_t vocab) const;
  // The same with `context` in place of config().context (as sample()).
  std::vector<std::pair<int32_t, double>> distribution(const float* logits, int64_t vocab,
                                                       std::span<const int32_t> context) const;

  const SamplerConfig& config() const { return config_; }

 private:
  double next_uniform();  // [0, 1), splitmix64: the same stream on every platform
  DrawParams draw_settings(int64_t vocab) const;  // the config's filters, no u yet
  bool has_penalties() const;
  // `logits` with the penalties applied (only called when has_penalties()).
  std::vector<float> penalized(const float* logits, int64_t vocab, std::span<const int32_t> context) const;
  std::vector<std::pair<int32_t, double>> distribution_of(const float* logits, int64_t vocab) const;

  SamplerConfig config_;
  uint64_t state_;
  std::unordered_map<int32_t, int64_t> generated_;  // id -> times sampled so far
};

}  // namespace nibble
