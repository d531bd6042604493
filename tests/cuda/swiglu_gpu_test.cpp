// The SwiGLU step on a GPU against moe_ref's f32 formula (silu(min(g, l)) *
// clamp(u, -l, l)). Bound per value: expf within 2 ulp and three f32
// roundings (division, two products) add at most 2^-20 |h|; the BF16
// rounding of the result 2^-9 |h| (round to nearest, 8 significant bits).
// Columns past `inter` must be written as zeros. Skipped, saying why,
// without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "device/cuda_device.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/random_weights.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

TEST(SwigluGpu, MatchesMoeRefsFormula) {
  REQUIRE_CUDA_DEVICE();
  for (float limit : {0.0f, 1.5f, 7.0f})
    for (int64_t inter : {1, 7, 2048}) {
      const int64_t n = 5, ld = (inter + 63) / 64 * 64;
      std::vector<float> g(static_cast<size_t>(n * inter)), u(g.size());
      random_normal(g.data(), int64_t(g.size()), 1, 4.0f);
      random_normal(u.data(), int64_t(u.size()), 2, 4.0f);
      const std::vector<float> h = swiglu_bf16_run_host(g, u, n, inter, ld, limit);
      ASSERT_EQ(h.size(), size_t(n * ld));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < ld; ++c) {
          const float got = h[size_t(t * ld + c)];
          if (c >= inter) {
            ASSERT_EQ(got, 0.0f) << "padding column " << c;
            continue;
          }
          float gi = g[size_t(t * inter + c)], ui = u[size_t(t * inter + c)];
          if (limit > 0) {
            gi = std::min(gi, limit);
            ui = std::clamp(ui, -limit, limit);
          }
          const double want = double(gi) / (1.0 + std::exp(-double(gi))) * double(ui);
          EXPECT_LE(std::fabs(got - want), (std::ldexp(1.0, -20) + std::ldexp(1.0, -9)) * std::fabs(want) + 1e-30)
              << "limit " << limit << " token " << t << " column " << c;
        }
    }
}

TEST(SwigluGpu, BadShapesAreClear) {
  // The check runs before anything touches the device.
  EXPECT_THROW(swiglu_bf16_run_host({1.0f}, {1.0f, 2.0f}, 1, 1, 1, 0.0f), Error);
}

}  // namespace
}  // namespace nibble
