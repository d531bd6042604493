// Next-token sampling: greedy, or temperature + top-k + top-p + min-p with a
// seeded generator, applied in Hugging Face's order (temperature, top-k,
// top-p, min-p) so that the same settings mean the same thing as there.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace nibble {

struct SamplerConfig {
  float temperature = 1.0f;  // 0 = greedy (argmax; ties -> lowest id)
  int64_t top_k = 0;         // keep the k most likely; 0 = off
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p; 1 = off
  float min_p = 0.0f;        // drop tokens below min_p * max prob; 0 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Throws nibble::Error for settings outside their range (naming the flag).
  explicit Sampler(const SamplerConfig& config);

  int32_t sample(const float* logits, int64_t vocab);

  // The distribution sample() draws from: (id, probability) of every token
  // that survives the filters, probabilities summing to 1. Exposed for tests.
  std::vector<std::pair<int32_t, double>> distribution(const float* logits, int64_t vocab) const;

  const SamplerConfig& config() const { return config_; }

 private:
  double next_uniform();  // [0, 1), splitmix64: the same stream on every platform

  SamplerConfig config_;
  uint64_t state_;
};

int32_t argmax(const float* logits, int64_t vocab);

}  // namespace nibble
