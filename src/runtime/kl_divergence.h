// Comparing two next-token distributions of the same model run two ways (a
// reference kernel configuration and a fast one): per position the KL
// divergence KL(P_base || P_test), both models' log-likelihood of the true
// next token and whether their top tokens agree; over many positions the
// statistics llama.cpp's `llama-perplexity --kl-divergence` reports for its
// quantization types (mean ± standard error, percentiles, perplexities,
// top-token agreement, Δp). Everything is computed in double from
// log-softmax of the f32 logits, so the comparison itself adds no error
// near the size of what it measures.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace nibble {

// One predicted position.
struct TokenComparison {
  double kl = 0;        // sum_i p_base(i) * (ln p_base(i) - ln p_test(i)), nats
  double nll_base = 0;  // -ln p_base(target)
  double nll_test = 0;  // -ln p_test(target)
  double p_base = 0;    // p_base(target)
  double p_test = 0;    // p_test(target)
  int32_t top_base = 0; // argmax of the base logits (lowest id on ties)
  int32_t top_test = 0; // argmax of the test logits
};

// base, test: [vocab] f32 logits; target: the true next token. Throws
// nibble::Error for a target outside [0, vocab) or a non-finite logit
// (naming which side and the index).
TokenComparison compare_logits(std::span<const float> base, std::span<const float> test, int32_t target);

// Linear interpolation between order statistics (numpy's default method):
// q in [0, 1] of `sorted` (ascending, non-empty).
double percentile_sorted(std::span<const double> sorted, double q);

struct MeanWithError {
  double mean = 0;
  double error = 0;  // standard error: sample standard deviation / sqrt(n); 0 for n < 2
};
MeanWithError mean_with_error(std::span<const double> values);

struct KlSummary {
  int64_t positions = 0;
  MeanWithError kl;                 // nats
  double kl_min = 0, kl_max = 0;
  double kl_median = 0, kl_p90 = 0, kl_p95 = 0, kl_p99 = 0, kl_p999 = 0;
  double ppl_base = 0, ppl_test = 0;  // exp(mean nll)
  MeanWithError ln_ppl_ratio;         // mean of nll_test - nll_base = ln(PPL_test / PPL_base)
  int64_t same_top = 0;               // positions whose top tokens agree
  double same_top_fraction = 0;
  MeanWithError delta_p;              // p_test(target) - p_base(target)
  double rms_delta_p = 0;
};

// Throws nibble::Error for an empty list.
KlSummary summarize_comparisons(std::span<const TokenComparison> positions);

}  // namespace nibble
