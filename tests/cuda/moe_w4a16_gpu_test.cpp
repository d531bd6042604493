// The W4A16 grouped expert GEMM on a GPU against the CPU reference
// (linear_ref, f64 sums of exactly dequantized weights), on random awkward
// shapes: 1-70 tokens, experts with 0, 1 and many tokens (past one pass of
// 8 and of 32), rows that are not a multiple of the 16-row strip, columns
// that end inside a 64-column chunk, and K split over CTAs. Skipped, saying
// why, without a CUDA device.
//
// Error bound, per output y = sum_c w_c x_c over K = cols terms, with
// M = sum_c |w_c x_c| (w exact, from dequantize_row):
//  - the kernel's activations are BF16: |bf16(x) - x| <= 2^-8 |x| (8
//    significant bits, round to nearest), so at most 2^-8 M from rounding x;
//  - the products w_c * bf16(x_c) are exact in f32 (2 x 8 significant
//    bits), and the tensor core adds them in f32, possibly truncating
//    (Fasi et al. 2021: no guard bits), then each group partial is scaled
//    (one f32 rounding) and added to the accumulator, and with k_splits
//    one atomic add per split: at most K + 2 * K/16 + k_splits + 2 roundings
//    of at most 2^-23 relative each, i.e. (K + K/8 + 8) * 2^-23 * M.
// Against linear_ref on the BF16-rounded x only the second term applies;
// against the original f32 x both do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "device/cuda_device.h"
#include "format/element.h"
#include "kernels/random_weights.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/linear.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

struct Case {
  Format format;
  int64_t rows, cols;
  std::vector<int32_t> counts;  // tokens per expert
  int64_t n_tokens;             // rows of x the assignments draw from
  int k_splits;
};

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(std::string(format_name(c.format)) + " [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) +
               "] experts " + std::to_string(c.counts.size()) + " tokens " + std::to_string(c.n_tokens) +
               " k_splits " + std::to_string(c.k_splits));
  std::vector<OwnedWeights> weights;
  std::vector<W4A16Matrix> experts;
  for (size_t e = 0; e < c.counts.size(); ++e) {
    weights.push_back(random_weights(c.format, c.rows, c.cols, seed * 1000 + e));
    experts.push_back(repack_w4a16(weights.back().view));
  }
  const int64_t ldx = experts[0].cols_padded;
  std::vector<float> x(size_t(c.n_tokens * c.cols)), xb(x.size());
  random_normal(x.data(), int64_t(x.size()), seed + 17);
  std::vector<uint16_t> x_bf16(size_t(c.n_tokens * ldx), 0);
  for (int64_t t = 0; t < c.n_tokens; ++t)
    for (int64_t k = 0; k < c.cols; ++k) {
      const uint16_t h = bf16_encode(x[size_t(t * c.cols + k)]);
      x_bf16[size_t(t * ldx + k)] = h;
      xb[size_t(t * c.cols + k)] = bf16_decode(h);
    }
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> offsets{0}, x_rows;
  for (int32_t n : c.counts) {
    for (int32_t i = 0; i < n; ++i) x_rows.push_back(int32_t(rng() % uint32_t(c.n_tokens)));
    offsets.push_back(offsets.back() + n);
  }
  MoeGemmHostResult r = moe_w4a16_run_host(experts, x_bf16, offsets, x_rows, c.k_splits, 1);
  ASSERT_EQ(r.y.size(), x_rows.size() * size_t(c.rows));

  std::vector<float> ref_b(size_t(c.n_tokens * c.rows)), ref_f(ref_b.size()), wrow(size_t(c.cols));
  const double k = double(c.cols);
  const double acc_u = (k + k / 8 + 8) * std::ldexp(1.0, -23), x_u = std::ldexp(1.0, -8);
  int64_t bad = 0;
  for (size_t e = 0; e < c.counts.size(); ++e) {
    if (c.counts[e] == 0) continue;
    linear_ref(weights[e].view, xb.data(), c.n_tokens, ref_b.data(), nullptr);
    linear_ref(weights[e].view, x.data(), c.n_tokens, ref_f.data(), nullptr);
    for (int64_t row = 0; row < c.rows; ++row) {
      dequantize_row(weights[e].view, row, wrow.data());
      for (int32_t a = offsets[e]; a < offsets[e + 1]; ++a) {
        const int64_t t = x_rows[size_t(a)];
        double m = 0;
        for (int64_t col = 0; col < c.cols; ++col) m += std::fabs(double(wrow[size_t(col)]) * x[size_t(t * c.cols + col)]);
        const double got = r.y[size_t(a) * size_t(c.rows) + size_t(row)];
        const double eb = std::fabs(got - ref_b[size_t(t * c.rows + row)]);
        const double ef = std::fabs(got - ref_f[size_t(t * c.rows + row)]);
        if ((eb > acc_u * m || ef > (acc_u + x_u) * m) && bad++ < 10)
          ADD_FAILURE() << "expert " << e << " row " << row << " assignment " << a << " (token " << t << "): got "
                        << got << ", reference " << ref_b[size_t(t * c.rows + row)] << " (bf16 x) / "
                        << ref_f[size_t(t * c.rows + row)] << " (f32 x), bounds " << acc_u * m << " / "
                        << (acc_u + x_u) * m;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(MoeW4A16Gpu, FixedAwkwardShapes) {
  REQUIRE_CUDA_DEVICE();
  // Expert token counts: none, one, past a pass of 8, past a pass of 32
  // (70: three passes of the batched variant), a few.
  const std::vector<int32_t> mixed = {0, 1, 9, 70, 3, 0, 33};
  const std::vector<int32_t> decode = {1, 0, 1, 0, 0, 1, 1, 2, 1};
  for (Format f : {Format::mxfp4, Format::nvfp4}) {
    run_case({f, 40, f == Format::mxfp4 ? 96 : 80, mixed, 70, 1}, 1);
    run_case({f, 40, f == Format::mxfp4 ? 96 : 80, mixed, 70, 2}, 2);
    run_case({f, 16, 64, {1}, 1, 1}, 3);
    run_case({f, 1, f == Format::mxfp4 ? 32 : 16, {2, 5}, 4, 1}, 4);
    run_case({f, 200, 2048, decode, 6, 1}, 5);
    run_case({f, 200, 2048, decode, 6, 4}, 6);
    run_case({f, 130, 1024, mixed, 70, 3}, 7);
  }
}

TEST(MoeW4A16Gpu, RandomRoutings) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(2026);
  for (int i = 0; i < 12; ++i) {
    const Format f = i % 2 ? Format::nvfp4 : Format::mxfp4;
    const int group = f == Format::mxfp4 ? 32 : 16;
    Case c;
    c.format = f;
    c.rows = 1 + int64_t(rng() % 150);
    c.cols = group * (1 + int64_t(rng() % 40));
    c.n_tokens = 1 + int64_t(rng() % 70);
    const int experts = 1 + int(rng() % 9), top_k = 1 + int(rng() % std::min(experts, 6));
    c.counts.assign(size_t(experts), 0);
    // Each token picks top_k distinct experts, as the router would.
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      std::vector<int> ids(static_cast<size_t>(experts));
      for (int e = 0; e < experts; ++e) ids[size_t(e)] = e;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int k = 0; k < top_k; ++k) ++c.counts[size_t(ids[size_t(k)])];
    }
    const int chunks = int((c.cols + 63) / 64);
    c.k_splits = 1 + int(rng() % uint32_t(std::min(chunks, 3)));
    run_case(c, 100 + uint64_t(i));
  }
}

// The fused gate/up + clamped SwiGLU against moe_ref's expert arithmetic:
// g = linear_ref(w1, bf16 x), u = linear_ref(w3, bf16 x), h = silu(min(g, l))
// * clamp(u, -l, l). Each of g, u carries at most the GEMM bound above
// (eg = acc_u * Mg, eu = acc_u * Mu); silu has slope <= 1.1 and the clamps
// slope <= 1, so |dh| <= 1.1 eg (|u| + eu) + eu |silu(g)|; then expf (2 ulp)
// and the f32 products (3 roundings) add 2^-20 |h|, and the BF16 rounding
// of h 2^-9 |h| (round to nearest, 8 significant bits).
void run_gate_up(Format f, int64_t inter, int64_t hidden, const std::vector<int32_t>& counts, int64_t n_tokens,
                 bool clamp, int k_splits, uint64_t seed) {
  SCOPED_TRACE(std::string(format_name(f)) + " gate/up [" + std::to_string(inter) + ", " + std::to_string(hidden) +
               "] clamp " + std::to_string(clamp) + " k_splits " + std::to_string(k_splits));
  std::vector<OwnedWeights> o1, o3;
  std::vector<W4A16Matrix> w1, w3;
  for (size_t e = 0; e < counts.size(); ++e) {
    o1.push_back(random_weights(f, inter, hidden, seed * 100 + e));
    o3.push_back(random_weights(f, inter, hidden, seed * 100 + 50 + e));
    w1.push_back(repack_w4a16(o1.back().view));
    w3.push_back(repack_w4a16(o3.back().view));
  }
  const int64_t ldx = w1[0].cols_padded;
  std::vector<float> x(size_t(n_tokens * hidden));
  random_normal(x.data(), int64_t(x.size()), seed + 3);
  std::vector<uint16_t> xb16(size_t(n_tokens * ldx), 0);
  std::vector<float> xb(x.size());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t k = 0; k < hidden; ++k) {
      xb16[size_t(t * ldx + k)] = bf16_encode(x[size_t(t * hidden + k)]);
      xb[size_t(t * hidden + k)] = bf16_decode(xb16[size_t(t * ldx + k)]);
    }
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> offsets{0}, x_rows;
  for (int32_t c : counts) {
    for (int32_t i = 0; i < c; ++i) x_rows.push_back(int32_t(rng() % uint32_t(n_tokens)));
    offsets.push_back(offsets.back() + c);
  }
  // The limit: the median |u| of the first expert with tokens, so that the
  // clamp bites on about half of the values whatever the weights' scale.
  float limit = 0.0f;
  if (clamp) {
    std::vector<float> uu(size_t(n_tokens * inter)), mags;
    for (size_t e = 0; e < counts.size() && mags.empty(); ++e)
      if (counts[e]) {
        linear_ref(o3[e].view, xb.data(), n_tokens, uu.data(), nullptr);
        for (float v : uu) mags.push_back(std::fabs(v));
      }
    std::nth_element(mags.begin(), mags.begin() + mags.size() / 2, mags.end());
    limit = mags[mags.size() / 2];
  }
  const std::vector<float> h = moe_w4a16_gate_up_run_host(w1, w3, xb16, offsets, x_rows, limit, k_splits);
  // The GEMM bound above with this run's split: K + K/8 + k_splits + 2 roundings.
  const double k = double(hidden), acc_u = (k + k / 8 + k_splits + 2) * std::ldexp(1.0, -23);
  std::vector<float> g(size_t(n_tokens * inter)), u(g.size()), r1(static_cast<size_t>(hidden)), r3(static_cast<size_t>(hidden));
  int bad = 0, clamped = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (!counts[e]) continue;
    linear_ref(o1[e].view, xb.data(), n_tokens, g.data(), nullptr);
    linear_ref(o3[e].view, xb.data(), n_tokens, u.data(), nullptr);
    for (int64_t row = 0; row < inter; ++row) {
      dequantize_row(o1[e].view, row, r1.data());
      dequantize_row(o3[e].view, row, r3.data());
      for (int32_t a = offsets[e]; a < offsets[e + 1]; ++a) {
        const int64_t t = x_rows[size_t(a)];
        double mg = 0, mu = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          mg += std::fabs(double(r1[size_t(c)]) * xb[size_t(t * hidden + c)]);
          mu += std::fabs(double(r3[size_t(c)]) * xb[size_t(t * hidden + c)]);
        }
        double gi = g[size_t(t * inter + row)], ui = u[size_t(t * inter + row)];
        if (limit > 0) {
          clamped += gi > limit || std::fabs(ui) > limit;
          gi = std::min<double>(gi, limit);
          ui = std::clamp<double>(ui, -limit, limit);
        }
        const double silu = gi / (1 + std::exp(-gi)), want = silu * ui;
        const double eg = acc_u * mg, eu = acc_u * mu;
        const double bound = 1.1 * eg * (std::fabs(ui) + eu) + eu * std::fabs(silu) +
                             (std::ldexp(1.0, -20) + std::ldexp(1.0, -9)) * std::fabs(want) + 1e-30;
        const double got = h[size_t(a) * size_t(inter) + size_t(row)];
        if (std::fabs(got - want) > bound && bad++ < 10)
          ADD_FAILURE() << "expert " << e << " row " << row << " assignment " << a << ": got " << got << ", want "
                        << want << ", bound " << bound;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  if (limit > 0) {
    EXPECT_GT(clamped, 0) << "the clamp was never exercised";
  }
}

TEST(MoeW4A16Gpu, FusedGateUpSwiglu) {
  REQUIRE_CUDA_DEVICE();
  const std::vector<int32_t> mixed = {0, 1, 9, 70, 3, 0, 33};
  for (Format f : {Format::mxfp4, Format::nvfp4}) {
    run_gate_up(f, 40, f == Format::mxfp4 ? 96 : 80, mixed, 70, false, 1, 1);
    run_gate_up(f, 40, f == Format::mxfp4 ? 96 : 80, mixed, 70, true, 1, 2);
    run_gate_up(f, 130, 1024, mixed, 70, true, 3, 3);  // the last split applies the SwiGLU
    run_gate_up(f, 200, 2048, {1, 0, 1, 1, 2}, 5, true, 8, 4);
  }
}

TEST(MoeW4A16Gpu, ErrorsAreClear) {
  // Needs no device: the checks run before anything is uploaded.
  try {
    moe_w4a16_run_host({}, {}, {0}, {}, 1, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_w4a16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
