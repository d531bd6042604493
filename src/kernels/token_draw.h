// The sampling rule itself, on one row of logits, apart from the state that
// feeds it (runtime/sampler.h keeps the seeded stream and the penalties):
//   greedy (temperature 0): the highest logit, the lowest id on ties;
//   else candidates sorted by (logit descending, id ascending), top-k (ties
//   with the k-th kept), softmax in double at 1/temperature, top-p (the
//   smallest prefix whose mass reaches top_p), min-p (p >= min_p * p_max),
//   renormalised; then the first candidate whose cumulative probability
//   exceeds the uniform draw u (the last if none does).
// Hugging Face's order (temperature, top-k, top-p, min-p). A backend draws
// with it where the logits are (Backend::draw_tokens; the GPU's version is
// kernels/cuda/sampling.h), so only token ids need cross to the host.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace nibble {

// One row's draw. Plain data: the GPU sampler reads it from device memory.
struct DrawParams {
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  double u = 0;              // the uniform draw in [0, 1) (unused when greedy)
  int64_t vocab = 0;         // draw among ids below this; 0 = every column
};

// The highest logit's id (the lowest id among equal ones).
int32_t argmax(const float* logits, int64_t vocab);

// (id, probability) of every token that survives the filters, in the
// candidates' order, probabilities summing to 1; greedy: the argmax alone.
std::vector<std::pair<int32_t, double>> token_distribution(const float* logits, int64_t vocab, float temperature,
                                                           int64_t top_k, float top_p, float min_p);

// The token `p` draws from logits [vocab columns] (p.vocab, when set and
// smaller, limits the ids).
int32_t draw_token(const float* logits, int64_t vocab, const DrawParams& p);

}  // namespace nibble
