// The GPU attention core (kernels/cuda/attention_sinks.h) against the same
// formula in double here: key lists mixing ring rows and compressed entries,
// repeats, an empty list (only the sink: o = 0), dims 64 and 512 (Flash's
// head_dim). Skipped, saying why, without a CUDA device; the index checks
// run without one.
//
// Bound, per output channel c of (t, h): the GPU's logit (32 lanes of d/32
// f32 products each, a 5-level tree, one multiply by the scale) is within
// e = (d/32 + 7) 2^-24 sum_c |q_c k_c| scale of the exact one; p_j =
// exp(l_j - mx) is then within eps = 2 e_max + 3 ulp + 2^-24 |l_j - mx|
// relative (the shift's rounding moves the exponent); a ratio of sums of
// such p changes by at most 2 eps max_j |k_jc|; the sums themselves add
// (count + 3) 2^-24 max_j |k_jc|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "device/cuda_device.h"
#include "kernels/cuda/attention_sinks.h"
#include "kernels/random_weights.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

std::vector<float> randn(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  random_normal(v.data(), int64_t(n), seed);
  return v;
}

TEST(AttentionSinksGpu, MatchesTheFormulaInDouble) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t d : {64, 512}) {
    const int64_t n = 4, H = 3, ring_rows = 10, entry_rows = 7, max_keys = 20;
    const float scale = 1.0f / std::sqrt(float(d));
    const std::vector<float> q = randn(size_t(n * H * d), 1), ring = randn(size_t(ring_rows * d), 2),
                             entries = randn(size_t(entry_rows * d), 3), sinks = randn(size_t(H), 4);
    std::vector<int32_t> keys(size_t(n * max_keys), 0), counts{5, 0, 20, 12};
    for (int64_t t = 0; t < n; ++t)
      for (int32_t j = 0; j < counts[size_t(t)]; ++j)
        keys[size_t(t * max_keys + j)] = (j + t) % 3 == 0 ? -1 - (j * 5 + int32_t(t)) % int32_t(entry_rows)
                                                          : (j * 3 + int32_t(t)) % int32_t(ring_rows);  // repeats too
    const std::vector<float> got = cuda_attention_sinks_host(q, ring, entries, keys, counts, sinks, n, H, d,
                                                             max_keys, scale);
    auto row = [&](int32_t i) { return i >= 0 ? ring.data() + i * d : entries.data() + (-1 - i) * d; };
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + (t * H + h) * d;
        const int32_t cnt = counts[size_t(t)];
        std::vector<double> l(static_cast<size_t>(cnt));
        double mx = sinks[size_t(h)], e_max = 0;
        for (int32_t j = 0; j < cnt; ++j) {
          const float* k = row(keys[size_t(t * max_keys + j)]);
          double dot = 0, mag = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += double(qh[c]) * k[c];
            mag += std::fabs(double(qh[c]) * k[c]);
          }
          l[size_t(j)] = dot * scale;
          mx = std::max(mx, l[size_t(j)]);
          e_max = std::max(e_max, (double(d) / 32 + 7) * 0x1p-24 * mag * scale);
        }
        double den = std::exp(sinks[size_t(h)] - mx), spread = 0;
        for (int32_t j = 0; j < cnt; ++j) {
          den += std::exp(l[size_t(j)] - mx);
          spread = std::max(spread, mx - l[size_t(j)]);
        }
        const double eps = 2 * e_max + 3 * 0x1p-24 + 0x1p-24 * spread;
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0, kmax = 0;
          for (int32_t j = 0; j < cnt; ++j) {
            const float kc = row(keys[size_t(t * max_keys + j)])[c];
            acc += std::exp(l[size_t(j)] - mx) * kc;
            kmax = std::max(kmax, std::fabs(double(kc)));
          }
          const double want = acc / den;
          const float g = got[size_t((t * H + h) * d + c)];
          if (cnt == 0) {
            ASSERT_EQ(g, 0.0f) << "only the sink: no value";
            continue;
          }
          ASSERT_LE(std::fabs(g - want), (2 * eps + (cnt + 3) * 0x1p-24) * kmax + 1e-30)
              << "dim " << d << " token " << t << " head " << h << " channel " << c;
        }
      }
  }
}

TEST(AttentionSinksGpu, BadKeysAreNamed) {
  // Checked before anything touches the device.
  const std::vector<float> q(4), ring(8), entries(4), sinks(1);
  EXPECT_THROW(cuda_attention_sinks_host(q, ring, entries, {2}, {1}, sinks, 1, 1, 4, 1, 0.5f), Error);   // ring has 2 rows
  EXPECT_THROW(cuda_attention_sinks_host(q, ring, entries, {-2}, {1}, sinks, 1, 1, 4, 1, 0.5f), Error);  // one entry
  EXPECT_THROW(cuda_attention_sinks_host(q, ring, entries, {0}, {2}, sinks, 1, 1, 4, 1, 0.5f), Error);   // count > max
}

}  // namespace
}  // namespace nibble
