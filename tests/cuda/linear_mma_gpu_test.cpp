// The tensor-core linear kernels (FP8 block-128, BF16) on a GPU against the
// CPU reference (linear_ref: f64 sums of exactly dequantized weights), on
// awkward shapes: 1-70 tokens (one pass of 8, passes of 32 with a partial
// last one), rows that are not a multiple of the 16-row strip or of the
// 128-row scale block, columns that end inside a chunk and inside a scale
// block, and K split over CTAs. Skipped, saying why, without a CUDA device.
//
// Error bound per output y = sum_c w_c x_c, M = sum_c |w_c x_c|:
//  - against linear_ref on the BF16-rounded x: the products w * bf16(x) are
//    exact in f32 (E4M3 or BF16 weights have <= 8 significant bits, so do
//    the activations), the tensor core sums them in f32 (possibly
//    truncating, Fasi et al. 2021), each FP8 chunk partial is scaled (one
//    rounding) and added (one), and each K split adds atomically (one): at
//    most cols + 2 * cols/16 + k_splits + 2 roundings of <= 2^-23, bounded
//    by (cols + cols/8 + 20) * 2^-23 * M;
//  - against the f32 x, BF16 rounding adds at most 2^-8 * M.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "device/cuda_device.h"
#include "format/element.h"
#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/linear.h"
#include "kernels/random_weights.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

void run_case(Format f, Fp8ScaleType st, int64_t rows, int64_t cols, int64_t n, int k_splits, uint64_t seed) {
  SCOPED_TRACE(std::string(format_name(f)) + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "] n " +
               std::to_string(n) + " k_splits " + std::to_string(k_splits));
  OwnedWeights w = random_weights(f, rows, cols, seed, st);
  const MmaMatrix m = repack_mma(w.view);
  std::vector<float> x(size_t(n * cols)), xb(x.size());
  random_normal(x.data(), int64_t(x.size()), seed + 5);
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_decode(bf16_encode(x[i]));
  const LinearMmaHostResult r = linear_mma_run_host(m, x, n, k_splits, 1);
  ASSERT_EQ(r.y.size(), size_t(n * rows));
  std::vector<float> ref_b(static_cast<size_t>(n * rows)), ref_f(ref_b.size()), wrow(static_cast<size_t>(cols));
  linear_ref(w.view, xb.data(), n, ref_b.data(), nullptr);
  linear_ref(w.view, x.data(), n, ref_f.data(), nullptr);
  const double acc_u = (double(cols) + double(cols) / 8 + 20) * std::ldexp(1.0, -23), x_u = std::ldexp(1.0, -8);
  int bad = 0;
  for (int64_t row = 0; row < rows; ++row) {
    dequantize_row(w.view, row, wrow.data());
    for (int64_t t = 0; t < n; ++t) {
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(wrow[size_t(c)]) * x[size_t(t * cols + c)]);
      const size_t i = size_t(t * rows + row);
      const double got = r.y[i];
      if ((std::fabs(got - ref_b[i]) > acc_u * mag || std::fabs(got - ref_f[i]) > (acc_u + x_u) * mag) && bad++ < 10)
        ADD_FAILURE() << "row " << row << " token " << t << ": got " << got << ", reference " << ref_b[i]
                      << " (bf16 x) / " << ref_f[i] << " (f32 x), bound " << acc_u * mag;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearMmaGpu, FixedAwkwardShapes) {
  REQUIRE_CUDA_DEVICE();
  for (Format f : {Format::fp8_block128, Format::bf16}) {
    for (int64_t n : {1, 2, 7, 8, 9, 33, 70}) run_case(f, Fp8ScaleType::ue8m0, 130, 200, n, 1, uint64_t(n));
    run_case(f, Fp8ScaleType::ue8m0, 1, 16, 1, 1, 1);
    run_case(f, Fp8ScaleType::ue8m0, 257, 1000, 5, 3, 2);
    run_case(f, Fp8ScaleType::ue8m0, 512, 4096, 1, 8, 3);
    run_case(f, Fp8ScaleType::ue8m0, 512, 4096, 64, 0, 4);  // the heuristic's split
  }
  run_case(Format::fp8_block128, Fp8ScaleType::f32, 33, 129, 4, 2, 5);
  run_case(Format::fp8_block128, Fp8ScaleType::f32, 300, 384, 40, 4, 6);
}

TEST(LinearMmaGpu, RandomShapes) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(77);
  for (int i = 0; i < 16; ++i) {
    const Format f = i % 2 ? Format::bf16 : Format::fp8_block128;
    const int64_t rows = 1 + rng() % 300, cols = 1 + rng() % 700, n = 1 + rng() % 70;
    const int64_t chunks = (cols + (f == Format::bf16 ? 15 : 31)) / (f == Format::bf16 ? 16 : 32);
    const int k = 1 + int(rng() % uint32_t(std::min<int64_t>(chunks, 5)));
    run_case(f, i % 3 ? Fp8ScaleType::ue8m0 : Fp8ScaleType::f32, rows, cols, n, k, 500 + uint64_t(i));
  }
}

TEST(LinearMmaGpu, ErrorsAreClear) {
  // Needs no device: the shape check comes before any upload.
  OwnedWeights w = random_weights(Format::bf16, 4, 16, 1);
  try {
    linear_mma_run_host(repack_mma(w.view), std::vector<float>(3), 1, 1, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_mma"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
