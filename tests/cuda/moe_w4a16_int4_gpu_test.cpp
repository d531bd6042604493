// The W4A16 grouped expert GEMM with INT4 experts (compressed-tensors
// pack-quantized, group 32) on a GPU against the CPU reference (linear_ref:
// f64 sums of the exactly dequantized weights), awkward shapes and routings
// as moe_w4a16_gpu_test.cpp, and the fused gate/up. Skipped, saying why,
// without a CUDA device.
//
// Error bound (moe_w4a16_gpu_test.cpp derives it): q is exact in BF16 and q
// times a BF16 activation exact in f32; the tensor core's f32 sums, the
// group partial times the f32 scale and the accumulator add round at most
// K + 2 K/16 + k_splits + 2 times by 2^-23 relative of M = sum |w x|:
// (K + K/8 + 8) 2^-23 M against linear_ref on the BF16-rounded x, plus 2^-8
// M against the f32 x.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "device/cuda_device.h"
#include "format/element.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/linear.h"
#include "kernels/random_weights.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

// x [n, cols] f32 -> BF16 rows of ldx (zero past cols), and their values.
void to_bf16(const std::vector<float>& x, int64_t n, int64_t cols, int64_t ldx, std::vector<uint16_t>* b16,
             std::vector<float>* xb) {
  b16->assign(size_t(n * ldx), 0);
  xb->resize(x.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < cols; ++k) {
      (*b16)[size_t(t * ldx + k)] = bf16_encode(x[size_t(t * cols + k)]);
      (*xb)[size_t(t * cols + k)] = bf16_decode((*b16)[size_t(t * ldx + k)]);
    }
}

void run_case(int64_t rows, int64_t cols, const std::vector<int32_t>& counts, int64_t n_tokens, int k_splits,
              uint64_t seed) {
  SCOPED_TRACE("int4 [" + std::to_string(rows) + ", " + std::to_string(cols) + "] tokens " +
               std::to_string(n_tokens) + " k_splits " + std::to_string(k_splits));
  std::vector<OwnedWeights> weights;
  std::vector<W4A16Matrix> experts;
  for (size_t e = 0; e < counts.size(); ++e) {
    weights.push_back(random_weights(Format::int4, rows, cols, seed * 1000 + e));
    experts.push_back(repack_w4a16(weights.back().view));
  }
  std::vector<float> x(size_t(n_tokens * cols)), xb;
  random_normal(x.data(), int64_t(x.size()), seed + 17);
  std::vector<uint16_t> x16;
  to_bf16(x, n_tokens, cols, experts[0].cols_padded, &x16, &xb);
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> offsets{0}, x_rows;
  for (int32_t n : counts) {
    for (int32_t i = 0; i < n; ++i) x_rows.push_back(int32_t(rng() % uint32_t(n_tokens)));
    offsets.push_back(offsets.back() + n);
  }
  MoeGemmHostResult r = moe_w4a16_run_host(experts, x16, offsets, x_rows, k_splits, 1);
  ASSERT_EQ(r.y.size(), x_rows.size() * size_t(rows));
  const double k = double(cols);
  const double acc_u = (k + k / 8 + 8) * std::ldexp(1.0, -23), x_u = std::ldexp(1.0, -8);
  std::vector<float> ref_b(size_t(n_tokens * rows)), ref_f(ref_b.size()), wrow(static_cast<size_t>(cols));
  int64_t bad = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    linear_ref(weights[e].view, xb.data(), n_tokens, ref_b.data(), nullptr);
    linear_ref(weights[e].view, x.data(), n_tokens, ref_f.data(), nullptr);
    for (int64_t row = 0; row < rows; ++row) {
      dequantize_row(weights[e].view, row, wrow.data());
      for (int32_t a = offsets[e]; a < offsets[e + 1]; ++a) {
        const int64_t t = x_rows[size_t(a)];
        double m = 0;
        for (int64_t c = 0; c < cols; ++c) m += std::fabs(double(wrow[size_t(c)]) * x[size_t(t * cols + c)]);
        const double got = r.y[size_t(a) * size_t(rows) + size_t(row)];
        const double eb = std::fabs(got - ref_b[size_t(t * rows + row)]);
        const double ef = std::fabs(got - ref_f[size_t(t * rows + row)]);
        if ((eb > acc_u * m || ef > (acc_u + x_u) * m) && bad++ < 10)
          ADD_FAILURE() << "expert " << e << " row " << row << " assignment " << a << ": got " << got
                        << ", reference " << ref_b[size_t(t * rows + row)] << " (bf16 x)";
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(MoeW4A16Int4Gpu, AwkwardShapesAndRoutings) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<int32_t> mixed = {0, 1, 9, 70, 3, 0, 33};
  const std::vector<int32_t> decode = {1, 0, 1, 0, 0, 1, 1, 2, 1};
  run_case(40, 96, mixed, 70, 1, 1);
  run_case(40, 96, mixed, 70, 2, 2);
  run_case(1, 32, {2, 5}, 4, 1, 3);
  run_case(200, 2048, decode, 6, 1, 4);
  run_case(200, 2048, decode, 6, 4, 5);
  run_case(130, 7168 / 4, mixed, 70, 3, 6);
}

// Fused gate/up + SwiGLU (no clamp: Kimi K2's plain SiLU) against the
// expert arithmetic on linear_ref's g and u; bound as in
// moe_w4a16_gpu_test.cpp's run_gate_up: each of g, u within the GEMM bound,
// silu's slope <= 1.1, then 2^-20 |h| for expf and the products and 2^-9 |h|
// for the BF16 rounding of h.
TEST(MoeW4A16Int4Gpu, GateUpFused) {
  REQUIRE_CUDA_DEVICE();
  const int64_t inter = 72, hidden = 160, n_tokens = 11;
  const std::vector<int32_t> counts = {3, 0, 9, 1};
  std::vector<OwnedWeights> o1, o3;
  std::vector<W4A16Matrix> w1, w3;
  for (size_t e = 0; e < counts.size(); ++e) {
    o1.push_back(random_weights(Format::int4, inter, hidden, 300 + e));
    o3.push_back(random_weights(Format::int4, inter, hidden, 350 + e));
    w1.push_back(repack_w4a16(o1.back().view));
    w3.push_back(repack_w4a16(o3.back().view));
  }
  std::vector<float> x(size_t(n_tokens * hidden)), xb;
  random_normal(x.data(), int64_t(x.size()), 9);
  std::vector<uint16_t> x16;
  to_bf16(x, n_tokens, hidden, w1[0].cols_padded, &x16, &xb);
  std::vector<int32_t> offsets{0}, x_rows;
  std::mt19937 rng{7};
  for (int32_t c : counts) {
    for (int32_t i = 0; i < c; ++i) x_rows.push_back(int32_t(rng() % uint32_t(n_tokens)));
    offsets.push_back(offsets.back() + c);
  }
  for (int k_splits : {1, 2}) {
    const std::vector<float> h = moe_w4a16_gate_up_run_host(w1, w3, x16, offsets, x_rows, 0.0f, k_splits);
    const double acc_u = (double(hidden) + double(hidden) / 8 + k_splits + 2) * std::ldexp(1.0, -23);
    std::vector<float> g(size_t(n_tokens * inter)), u(g.size()), r1(static_cast<size_t>(hidden)), r3(static_cast<size_t>(hidden));
    for (size_t e = 0; e < counts.size(); ++e) {
      if (!counts[e]) continue;
      linear_ref(o1[e].view, xb.data(), n_tokens, g.data(), nullptr);
      linear_ref(o3[e].view, xb.data(), n_tokens, u.data(), nullptr);
      for (int64_t i = 0; i < inter; ++i) {
        dequantize_row(o1[e].view, i, r1.data());
        dequantize_row(o3[e].view, i, r3.data());
        for (int32_t a = offsets[e]; a < offsets[e + 1]; ++a) {
          const int64_t t = x_rows[size_t(a)];
          double mg = 0, mu = 0;
          for (int64_t c = 0; c < hidden; ++c) {
            mg += std::fabs(double(r1[size_t(c)]) * xb[size_t(t * hidden + c)]);
            mu += std::fabs(double(r3[size_t(c)]) * xb[size_t(t * hidden + c)]);
          }
          const double gv = g[size_t(t * inter + i)], uv = u[size_t(t * inter + i)];
          const double silu = gv / (1.0 + std::exp(-gv)), want = silu * uv;
          const double eg = acc_u * mg, eu = acc_u * mu;
          const double bound = 1.1 * eg * (std::fabs(uv) + eu) + eu * std::fabs(silu) +
                               (std::ldexp(1.0, -20) + std::ldexp(1.0, -9)) * std::fabs(want) + 1e-30;
          const double got = h[size_t(a) * size_t(inter) + size_t(i)];
          ASSERT_LE(std::fabs(got - want), bound) << "k_splits " << k_splits << " expert " << e << " row " << i
                                                  << " assignment " << a;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nibble
