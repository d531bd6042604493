// The GPU indexer selection (kernels/cuda/indexer_topk.h): its scores
// against the formula in double, and its selection exactly the CPU rule
// (indexer_select's comparator: higher score, then lower index) applied to
// the scores it computed, so a near-tie cannot make the test flaky. Ties are
// forced by repeated entries. Skipped, saying why, without a CUDA device;
// the shape checks run without one.
//
// Score bound: each head's dot is 32 lanes of d/32 f32 products and a
// 5-level tree ((d/32 + 6) 2^-24 of sum |q k|), the relu exact, three
// products with the scales (3 more), the H heads summed in order (H more):
// within (d/32 + 9 + H) 2^-24 sum_h ss (|hw_h| ws) sum_c |q_hc k_c|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "device/cuda_device.h"
#include "kernels/cuda/indexer_topk.h"
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

TEST(IndexerTopkGpu, ScoresAndSelectionFollowTheCpuRule) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t topk : {1, 4, 64}) {
    const int64_t n = 5, H = 8, d = 128, E = 300;
    const std::vector<float> q = randn(size_t(n * H * d), 1), hw = randn(size_t(n * H), 2);
    std::vector<float> entries = randn(size_t(E * d), 3);
    for (int64_t e = 200; e < 210; ++e)  // entries 200..209 repeat entry 5: equal scores
      std::copy(entries.begin() + 5 * d, entries.begin() + 6 * d, entries.begin() + e * d);
    const std::vector<int32_t> visible{0, 1, 3, 300, 150};
    const IndexerTopkHost r = cuda_indexer_topk_host(q, hw, entries, visible, n, H, d, topk);
    const int64_t mv = 300;
    const double ss = 1.0 / std::sqrt(double(d)), ws = 1.0 / std::sqrt(double(H));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t vis = visible[size_t(t)], k = std::min(vis, topk);
      for (int64_t s = 0; s < vis; ++s) {
        double want = 0, mag = 0;
        for (int64_t h = 0; h < H; ++h) {
          double dot = 0, m = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += double(q[size_t((t * H + h) * d + c)]) * entries[size_t(s * d + c)];
            m += std::fabs(double(q[size_t((t * H + h) * d + c)]) * entries[size_t(s * d + c)]);
          }
          want += std::max(dot, 0.0) * ss * (hw[size_t(t * H + h)] * ws);
          mag += ss * std::fabs(hw[size_t(t * H + h)] * ws) * m;
        }
        ASSERT_LE(std::fabs(r.scores[size_t(t * mv + s)] - want), (double(d) / 32 + 9 + H) * 0x1p-24 * mag + 1e-30)
            << "topk " << topk << " query " << t << " entry " << s;
      }
      ASSERT_EQ(r.counts[size_t(t)], k) << "query " << t;
      std::vector<int32_t> order(static_cast<size_t>(vis));
      std::iota(order.begin(), order.end(), 0);
      const float* sc = r.scores.data() + t * mv;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return sc[a] != sc[b] ? sc[a] > sc[b] : a < b; });
      for (int64_t j = 0; j < topk; ++j)
        ASSERT_EQ(r.selected[size_t(t * topk + j)], j < k ? order[size_t(j)] : -1)
            << "topk " << topk << " query " << t << " rank " << j;
    }
  }
}

TEST(IndexerTopkGpu, BadShapesAreClear) {
  // Checked before anything touches the device.
  EXPECT_THROW(cuda_indexer_topk_host(std::vector<float>(8), std::vector<float>(2), std::vector<float>(8), {3}, 1, 2,
                                      4, 1),
               Error);  // 3 visible of 2 entries
  EXPECT_THROW(cuda_indexer_topk_host(std::vector<float>(7), std::vector<float>(2), std::vector<float>(8), {1}, 1, 2,
                                      4, 1),
               Error);  // q is not [1, 2, 4]
}

}  // namespace
}  // namespace nibble
