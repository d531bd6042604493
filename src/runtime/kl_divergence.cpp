#include "runtime/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace nibble {

namespace {

// ln sum_i exp(x_i) in double, shifted by the maximum. Also returns the
// argmax (first on ties). Throws for a non-finite logit.
double log_sum_exp(std::span<const float> x, const char* side, int32_t* argmax) {
  float mx = x[0];
  int32_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) fail("kl: ", side, " logit ", i, " is not finite (", x[i], ")");
    if (x[i] > mx) {
      mx = x[i];
      at = int32_t(i);
    }
  }
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - double(mx));
  *argmax = at;
  return double(mx) + std::log(sum);
}

}  // namespace

TokenComparison compare_logits(std::span<const float> base, std::span<const float> test, int32_t target) {
  if (base.size() != test.size()) fail("kl: base has ", base.size(), " logits but test has ", test.size());
  if (base.empty()) fail("kl: empty logits");
  if (target < 0 || size_t(target) >= base.size())
    fail("kl: target token ", target, " is outside the vocabulary [0, ", base.size(), ")");
  TokenComparison c;
  const double lse_b = log_sum_exp(base, "base", &c.top_base);
  const double lse_t = log_sum_exp(test, "test", &c.top_test);
  double kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double lb = double(base[i]) - lse_b;  // ln p_base(i)
    const double lt = double(test[i]) - lse_t;  // ln p_test(i)
    kl += std::exp(lb) * (lb - lt);
  }
  c.kl = kl;
  const double lb_t = double(base[size_t(target)]) - lse_b;
  const double lt_t = double(test[size_t(target)]) - lse_t;
  c.nll_base = -lb_t;
  c.nll_test = -lt_t;
  c.p_base = std::exp(lb_t);
  c.p_test = std::exp(lt_t);
  return c;
}

double percentile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) fail("percentile of an empty list");
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - double(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

MeanWithError mean_with_error(std::span<const double> values) {
  MeanWithError r;
  if (values.empty()) return r;
  double sum = 0;
  for (double v : values) sum += v;
  r.mean = sum / double(values.size());
  if (values.size() >= 2) {
    double ss = 0;
    for (double v : values) ss += (v - r.mean) * (v - r.mean);
    const double var = ss / double(values.size() - 1);
    r.error = std::sqrt(var / double(values.size()));
  }
  return r;
}

KlSummary summarize_comparisons(std::span<const TokenComparison> positions) {
  if (positions.empty()) fail("kl: no positions to summarize");
  const size_t n = positions.size();
  KlSummary s;
  s.positions = int64_t(n);
  std::vector<double> kl(n), ln_ratio(n), dp(n);
  double nll_b = 0, nll_t = 0, dp2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const TokenComparison& c = positions[i];
    kl[i] = c.kl;
    ln_ratio[i] = c.nll_test - c.nll_base;
    dp[i] = c.p_test - c.p_base;
    dp2 += dp[i] * dp[i];
    nll_b += c.nll_base;
    nll_t += c.nll_test;
    if (c.top_base == c.top_test) ++s.same_top;
  }
  s.kl = mean_with_error(kl);
  s.ln_ppl_ratio = mean_with_error(ln_ratio);
  s.delta_p = mean_with_error(dp);
  s.rms_delta_p = std::sqrt(dp2 / double(n));
  s.ppl_base = std::exp(nll_b / double(n));
  s.ppl_test = std::exp(nll_t / double(n));
  s.same_top_fraction = double(s.same_top) / double(n);
  std::sort(kl.begin(), kl.end());
  s.kl_min = kl.front();
  s.kl_max = kl.back();
  s.kl_median = percentile_sorted(kl, 0.5);
  s.kl_p90 = percentile_sorted(kl, 0.90);
  s.kl_p95 = percentile_sorted(kl, 0.95);
  s.kl_p99 = percentile_sorted(kl, 0.99);
  s.kl_p999 = percentile_sorted(kl, 0.999);
  return s;
}

}  // namespace nibble
