// The GPU RoPE (kernels/cuda/rope_cuda.h) against RopeTable::apply, for the
// main (theta 10000) and the compress flavour (YaRN blend), forward and
// inverse, at positions up to 2^20. Skipped, saying why, without a CUDA
// device.
//
// Bound: both sides form the angle as the same f32 product; cosf / sinf are
// within 2 ulp on the GPU (CUDA C Programming Guide, full range reduction
// without fast math) and 1 ulp on the host, so c and s differ by at most
// 3 * 2^-24 (|c|, |s| <= 1) times the attention factor; each output is two
// products and a sum (or one FMA) on either side: within
// (3 + 4) 2^-24 af (|x0| + |x1|), taken as 8.
#include <gtest/gtest.h>

#include <cmath>

#include "device/cuda_device.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/random_weights.h"
#include "model/deepseek_v4_rope.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

TEST(RopeGpu, MatchesRopeTable) {
  REQUIRE_CUDA_DEVICE();
  RopeConfig main_cfg;
  RopeConfig compress;
  compress.theta = 160000;
  compress.yarn = true;
  compress.factor = 16;
  compress.original_max_position = 65536;
  const std::vector<int64_t> positions{0, 1, 2, 127, 128, 4095, 65535, 65536, 1 << 20};
  for (const RopeConfig* cfg : {&main_cfg, &compress})
    for (int64_t rope_dim : {2, 64})
      for (int64_t width : {rope_dim, int64_t(512)})
        for (bool inverse : {false, true}) {
          const RopeTable table(*cfg, rope_dim);
          const int64_t heads = 3, n = int64_t(positions.size());
          std::vector<float> x(size_t(n * heads * width));
          random_normal(x.data(), int64_t(x.size()), uint64_t(rope_dim + width), 2.0f);
          std::vector<float> want = x;
          for (int64_t t = 0; t < n; ++t)
            table.apply(want.data() + t * heads * width, heads, width, positions[size_t(t)], inverse);
          const std::vector<float> got = cuda_rope_host(table.inv_freq(), table.attention_factor(), x, heads, width, positions, inverse);
          for (int64_t v = 0; v < n * heads; ++v)
            for (int64_t c = 0; c < width; ++c) {
              const size_t i = size_t(v * width + c);
              if (c < width - rope_dim) {
                ASSERT_EQ(got[i], x[i]) << "channel " << c << " is not a RoPE channel";
                continue;
              }
              const size_t pair = i - size_t((c - (width - rope_dim)) % 2);
              const double mag = std::fabs(x[pair]) + std::fabs(x[pair + 1]);
              ASSERT_LE(std::fabs(got[i] - want[i]), 8 * 0x1p-24 * mag * std::fmax(1.0, table.attention_factor()))
                  << (cfg->yarn ? "compress" : "main") << " rope_dim " << rope_dim << " width " << width
                  << " inverse " << inverse << " vector " << v << " channel " << c;
            }
        }
}

TEST(RopeGpu, BadShapesAreClear) {
  const RopeTable table(RopeConfig{}, 64);
  EXPECT_THROW(cuda_rope_host(table.inv_freq(), table.attention_factor(), std::vector<float>(10), 1, 64, {0}, false), Error);  // x is not [1, 64]
  EXPECT_THROW(cuda_rope(nullptr, 63, 1.0f, nullptr, 1, 1, 64, nullptr, false), Error);  // odd rope_dim
}

}  // namespace
}  // namespace nibble
