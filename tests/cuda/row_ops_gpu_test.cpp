// The row-wise GPU ops (kernels/cuda/row_ops.h) against the CPU: RMSNorm
// against model/ops.h's rms_norm (double sum of squares), the F32 linear
// against a double dot product, the rest against plain host loops. Skipped,
// saying why, without a CUDA device; the shape checks run without one.
//
// Bounds. RMSNorm: each of 256 threads sums dim/256 squares in f32, then a
// 5 + 3 level shuffle tree: the sum of squares is within
// (dim/256 + 9) 2^-24 relative (positive terms, the squares' rounding
// included); r = 1/sqrt(mean + eps) within half that plus 4 roundings
// (division, add, sqrt, reciprocal), y = (x r) w two more: 6 on the GPU;
// the CPU's double sum then float(mean), + eps, sqrt, reciprocal, two
// products: 6 more. In all (dim/256 + 9) 2^-25 + 12 2^-24 relative. The F32 linear:
// per lane cols/32 products summed in f32, a 5-level tree: within
// (cols/32 + 6) 2^-24 sum |w x|. add / gather / embed are exact (one f32
// add or a copy, the same operation as the host's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "device/cuda_device.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/random_weights.h"
#include "model/ops.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.0f) {
  std::vector<float> v(n);
  random_normal(v.data(), int64_t(n), seed, sd);
  return v;
}

TEST(RowOpsGpu, RmsNormMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t dim : {1, 7, 255, 257, 4096, 16384})
    for (bool weighted : {false, true}) {
      const int64_t n = 5;
      std::vector<float> x = randn(size_t(n * dim), uint64_t(dim), 3.0f);
      x[0] = 0;  // a zero element and (dim 1) a zero row: r = 1/sqrt(eps)
      const std::vector<float> w = weighted ? randn(size_t(dim), 99) : std::vector<float>{};
      std::vector<float> want(x.size());
      rms_norm(x.data(), n, dim, weighted ? w.data() : nullptr, 1e-6, want.data());
      const std::vector<float> got = cuda_rms_norm_host(x, n, dim, w, 1e-6f);
      const double rel = (double(dim) / 256 + 9) * 0x1p-25 + 12 * 0x1p-24;
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::fabs(want[i]) + 1e-30)
            << "dim " << dim << " weighted " << weighted << " element " << i;
    }
}

TEST(RowOpsGpu, LinearF32MatchesDoubleDot) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t rows : {1, 24, 33})
    for (int64_t cols : {1, 31, 100, 16384}) {
      const int64_t n = 3;
      const std::vector<float> w = randn(size_t(rows * cols), 7), x = randn(size_t(n * cols), 8);
      const std::vector<float> got = cuda_linear_f32_host(w, rows, cols, x, n);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += double(w[size_t(r * cols + c)]) * x[size_t(t * cols + c)];
            mag += std::fabs(double(w[size_t(r * cols + c)]) * x[size_t(t * cols + c)]);
          }
          ASSERT_LE(std::fabs(got[size_t(t * rows + r)] - want), (double(cols) / 32 + 6) * 0x1p-24 * mag + 1e-30)
              << rows << " x " << cols << " token " << t << " row " << r;
        }
    }
}

TEST(RowOpsGpu, StreamsGatherBiasAreExact) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 6, cols = 37, copies = 4;
  const std::vector<float> x = randn(size_t(n * cols), 1), s = randn(size_t(n * cols * copies), 2);
  const std::vector<float> got = cuda_add_to_streams_host(x, n, cols, copies, s);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols * copies; ++c)
      ASSERT_EQ(got[size_t(t * cols * copies + c)], s[size_t(t * cols * copies + c)] + x[size_t(t * cols + c % cols)]);

  const std::vector<int64_t> rows{5, 0, 0, 3};
  const std::vector<float> g = cuda_gather_rows_host(x, cols, rows);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(g[r * cols + size_t(c)], x[size_t(rows[r] * cols + c)]);

  const std::vector<float> bias = randn(size_t(cols), 3);
  const std::vector<float> b = cuda_add_bias_host(x, n, cols, bias);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(b[size_t(t * cols + c)], x[size_t(t * cols + c)] + bias[size_t(c)]);
}

TEST(RowOpsGpu, CopyColsMovesExactlyTheBlock) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 4, src_ld = 19, dst_ld = 11;
  const std::vector<float> src = randn(size_t(n * src_ld), 5), dst = randn(size_t(n * dst_ld), 6);
  const std::vector<float> got = cuda_copy_cols_host(src, src_ld, 7, dst, dst_ld, 3, n, 6);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < dst_ld; ++c) {
      const bool in = c >= 3 && c < 9;
      ASSERT_EQ(got[size_t(r * dst_ld + c)], in ? src[size_t(r * src_ld + 7 + c - 3)] : dst[size_t(r * dst_ld + c)])
          << "row " << r << " column " << c;
    }
}

TEST(RowOpsGpu, EmbedF32AndBf16RowsAndBadIds) {
  REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 11, dim = 300, copies = 3;
  const std::vector<float> f = randn(size_t(vocab * dim), 4);
  std::vector<uint16_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    b[i] = uint16_t(bits >> 16);  // truncation: any BF16 value will do, the decode is what is checked
  }
  const std::vector<int32_t> ids{10, 0, 3, 3};
  for (Format fmt : {Format::f32, Format::bf16}) {
    WeightView t;
    t.format = fmt;
    t.rows = vocab;
    t.cols = dim;
    t.data = fmt == Format::f32 ? reinterpret_cast<const uint8_t*>(f.data()) : reinterpret_cast<const uint8_t*>(b.data());
    t.name = "embed";
    const std::vector<float> got = cuda_embed_host(t, ids, copies);
    std::vector<float> row(static_cast<size_t>(dim));
    for (size_t k = 0; k < ids.size(); ++k) {
      dequantize_row(t, ids[k], row.data());
      for (int64_t c = 0; c < copies; ++c)
        for (int64_t d = 0; d < dim; ++d) ASSERT_EQ(got[(k * copies + size_t(c)) * dim + size_t(d)], row[size_t(d)]);
    }
    try {
      cuda_embed_host(t, {1, 11}, 1);
      FAIL() << "id 11 of a vocabulary of 11 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token 1 has id 11"), std::string::npos) << e.what();
    }
  }
}

TEST(RowOpsGpu, BadShapesAreClear) {
  // Every check runs before anything touches the device.
  EXPECT_THROW(cuda_rms_norm_host({1, 2, 3}, 2, 2, {}, 1e-6f), Error);
  EXPECT_THROW(cuda_linear_f32_host({1, 2}, 1, 3, {1, 2, 3}, 1), Error);
  EXPECT_THROW(cuda_gather_rows_host({1, 2, 3, 4}, 2, {2}), Error);
  EXPECT_THROW(cuda_add_bias_host({1, 2}, 1, 2, {1}), Error);
  EXPECT_THROW(cuda_copy_cols_host({1, 2, 3}, 3, 2, {0, 0}, 2, 0, 1, 2), Error);  // src columns 2..4 of 3
}

}  // namespace
}  // namespace nibble
