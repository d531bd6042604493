// Every SIMD linear kernel against the scalar reference (dequantize_row +
// f64 accumulation) on random weights of awkward shapes, every format,
// batches 1..9, 12, 17 and 70, with and without threads: the default (exact) kernels and
// the opt-in int8 and int16 ones, each ISA called directly (AVX2 runs on
// AVX-512 machines too).
//
// Error budgets, derived from what each path rounds:
// - f32-activation paths (every format in the default kernels; FP8, BF16,
//   F32 in the int8 ones): products are exact (the weights widen to f32
//   exactly, and an E2M1 or E4M3 value times an f32 is exact in an FMA),
//   only the f32 accumulation rounds, so the result is within 1e-5 relative
//   L2 of the f64 reference.
// - int8- and int16-activation paths (MXFP4, NVFP4 in the int8 and int16
//   kernels): x is rounded to int8 (int16) per block of 32 with step
//   d_b = amax_b / qmax, qmax = 127 (32767), so each output is
//   off by at most sum_j |w_j| * d_b(j) / 2 (checked per element), and on
//   Gaussian data the error's RMS is sqrt(sum_j w_j^2 d_b(j)^2 / 12)
//   (checked in L2, within 30%). The int16 steps are 258 times finer, so
//   there the f32 accumulation's budget (below) is added in full rather
//   than as the int8 check's 1e-5 of sum |w x|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/random_weights.h"
#include "rounding.h"
#include "support/kernel_variant.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

struct Case {
  Format format;
  int64_t rows, cols;
  Fp8ScaleType fp8 = Fp8ScaleType::ue8m0;
};

using Variant = test::KernelVariant;
using test::variant_name;

std::string describe(const Case& c, int64_t n, const Variant& v) {
  return std::string(format_name(c.format)) + (c.format == Format::fp8_block128 && c.fp8 == Fp8ScaleType::f32 ? "(f32 scales)" : "") +
         " [" + std::to_string(c.rows) + " x " + std::to_string(c.cols) + "] n=" + std::to_string(n) +
         " kernel=" + variant_name(v);
}

bool isa_available(CpuIsa isa) { return cpu_isa_unsupported(isa, host_cpu_features()).empty(); }

using test::rel_l2;  // rounding.h

// Dequantized weights, row-major [rows, cols], f64.
std::vector<double> dequantized(const WeightView& w) {
  std::vector<float> row(size_t(w.cols));
  std::vector<double> out(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) out[size_t(r * w.cols + c)] = row[size_t(c)];
  }
  return out;
}

void check_case(const Case& c, const Variant& v, int64_t n, ThreadPool* pool, uint64_t seed) {
  SCOPED_TRACE(describe(c, n, v));
  OwnedWeights w = random_weights(c.format, c.rows, c.cols, seed, c.fp8);
  std::vector<float> x(size_t(n * c.cols));
  random_normal(x.data(), int64_t(x.size()), seed + 101);
  std::vector<float> y(size_t(n * c.rows), NAN), ref(size_t(n * c.rows));
  linear_for_isa(v.isa, v.acts)(w.view, x.data(), n, y.data(), pool);
  linear_ref(w.view, x.data(), n, ref.data(), nullptr);

  const x86::ActsClass cls = cpu::isa_kernels(v.isa, v.acts).acts_class(cpu::raw_weights(w.view).kind, n);
  // Only the opt-in kernels may round activations.
  const bool quantized = cls == x86::ActsClass::int8_blocks || cls == x86::ActsClass::int16_fp4;
  if (v.acts == Fp4Acts::f32) {
    ASSERT_FALSE(quantized);
  }
  if (v.acts == Fp4Acts::int16) {
    ASSERT_EQ(cls == x86::ActsClass::int16_fp4, c.format == Format::mxfp4 || c.format == Format::nvfp4);
  }
  if (v.acts == Fp4Acts::bf16x3) {
    const bool tiles = c.format == Format::mxfp4 || c.format == Format::nvfp4 || c.format == Format::bf16 ||
                       (c.format == Format::fp8_block128 && c.fp8 == Fp8ScaleType::ue8m0);
    ASSERT_EQ(cls == x86::ActsClass::bf16x3, tiles && n >= x86::kAmxMinTokens);
  }
  std::vector<double> wd = dequantized(w.view);
  // f32 accumulation: a 16-lane sum runs cols/16 steps (plus a few for tile
  // sums, scales and the final reduction), each rounding by at most 2^-24
  // of the partial sums, which never exceed sum_j |w_j x_j|.
  const double f32_steps = double(c.cols) / 16 + 24;
  if (!quantized) {
    // In L2, and per element against the worst case of f32 accumulation
    // (f32_steps).
    // The AMX tiles sum one output's products in one chain, two per
    // instruction: cols additions into C_hi (each within 2^-24 of the
    // partials, <= sum |w x|), 2 cols into C_lo, whose partials are below
    // 2^-8 of that (|x - hi| <= 2^-9 |x|, hi being x rounded to 8 bits), and
    // a few for C_hi + C_lo and the scales.
    const double steps =
        cls == x86::ActsClass::bf16x3 ? double(c.cols) * (1 + 2 * 0x1p-8) + 8 : f32_steps;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < c.rows; ++r) {
        const size_t i = size_t(t * c.rows + r);
        ASSERT_TRUE(std::isfinite(y[i])) << "output " << i;
        double mag = 0;
        for (int64_t j = 0; j < c.cols; ++j) mag += std::fabs(wd[size_t(r * c.cols + j)] * x[size_t(t * c.cols + j)]);
        ASSERT_LE(std::fabs(double(y[i]) - ref[i]), steps * 0x1p-24 * mag + 1e-30)
            << "token " << t << " row " << r << ": " << y[i] << " vs " << ref[i];
      }
    EXPECT_LE(rel_l2(y, ref), 1e-5);
    return;
  }

  // The int8 / int16 budget, from the activation quantization steps.
  const bool int16 = cls == x86::ActsClass::int16_fp4;
  const double qmax = int16 ? 32767.0 : 127.0;
  std::vector<double> step(size_t(n * c.cols));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t b = 0; b < c.cols; b += 32) {
      double amax = 0;
      for (int64_t j = b; j < std::min(b + 32, c.cols); ++j) amax = std::max(amax, std::fabs(double(x[size_t(t * c.cols + j)])));
      for (int64_t j = b; j < std::min(b + 32, c.cols); ++j) step[size_t(t * c.cols + j)] = amax / qmax;
    }
  double err2 = 0, pred2 = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < c.rows; ++r) {
      double hard = 0, var = 0, mag = 0;
      for (int64_t j = 0; j < c.cols; ++j) {
        double wj = wd[size_t(r * c.cols + j)], sj = step[size_t(t * c.cols + j)];
        hard += std::fabs(wj) * sj / 2;
        var += wj * wj * sj * sj / 12;
        mag += std::fabs(wj * x[size_t(t * c.cols + j)]);
      }
      const double got = y[size_t(t * c.rows + r)], want = ref[size_t(t * c.rows + r)];
      // f32 accumulation and scale products add a few ulps of the magnitude.
      const double f32_budget = int16 ? f32_steps * 0x1p-24 * mag : 1e-5 * mag;
      ASSERT_LE(std::fabs(got - want), hard * 1.0001 + f32_budget + 1e-30)
          << "token " << t << " row " << r << ": " << got << " vs " << want;
      err2 += (got - want) * (got - want);
      pred2 += var;
    }
  // Statistically: the RMS error matches the uniform-rounding prediction.
  if (n * c.rows >= 200) {
    EXPECT_LE(std::sqrt(err2 / pred2), 1.3);
    EXPECT_GE(std::sqrt(err2 / pred2), 0.7);
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // FP4: cols multiples of the block but not of 64 / 128 (every tail),
      // rows not multiples of the row blocks (2, 4), wide rows.
      {Format::mxfp4, 61, 32}, {Format::mxfp4, 7, 96}, {Format::mxfp4, 200, 160}, {Format::mxfp4, 33, 416},
      {Format::mxfp4, 3, 4096}, {Format::mxfp4, 9, 8224}, {Format::mxfp4, 1, 128}, {Format::mxfp4, 6, 224},
      {Format::nvfp4, 61, 16}, {Format::nvfp4, 7, 48}, {Format::nvfp4, 200, 80}, {Format::nvfp4, 33, 144},
      {Format::nvfp4, 17, 272}, {Format::nvfp4, 5, 2064}, {Format::nvfp4, 10, 4112}, {Format::nvfp4, 2, 112},
      // Rows of 8 KB and more (AVX-512 runs one token four rows at a time
      // there), rows left over.
      {Format::mxfp4, 9, 16416}, {Format::nvfp4, 6, 16400},
      // FP8: rows across 128-row scale bands, cols not multiples of 16/128,
      // and a row wider than 64 tiles.
      {Format::fp8_block128, 1, 1}, {Format::fp8_block128, 7, 100}, {Format::fp8_block128, 257, 129},
      {Format::fp8_block128, 130, 300}, {Format::fp8_block128, 3, 8320},
      {Format::fp8_block128, 131, 200, Fp8ScaleType::f32}, {Format::fp8_block128, 5, 8195, Fp8ScaleType::f32},
      // BF16 / F32: odd sizes; F32 4100 cols makes row tiles of 16 rows;
      // BF16 rows go in blocks of 4 (AVX2: 4, 3 at two tokens, 2) with 1..3
      // rows left over (20 rows: 2 past the 3-row blocks).
      {Format::bf16, 1, 1}, {Format::bf16, 9, 17}, {Format::bf16, 100, 257}, {Format::bf16, 3, 33},
      {Format::bf16, 7, 4100}, {Format::bf16, 66, 96}, {Format::bf16, 20, 200},
      {Format::f32, 1, 3}, {Format::f32, 13, 100}, {Format::f32, 61, 4100},
  };
  return all;
}

class LinearCpu : public ::testing::TestWithParam<Variant> {
 protected:
  LinearFn fn() const { return linear_for_isa(GetParam().isa, GetParam().acts); }
};

TEST_P(LinearCpu, MatchesReferenceSingleThread) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  uint64_t seed = 1;
  for (const Case& c : cases())
    // Every count up to 9 (the AVX2 FP4 / FP8 kernels decode once per call
    // from 9 tokens on) and past one 64-token call (70).
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 70}) check_case(c, GetParam(), n, nullptr, seed++);
}

TEST_P(LinearCpu, MatchesReferenceThreaded) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  ThreadPool pool(3);  // more threads than cores: uneven, preempted parts
  uint64_t seed = 1000;
  for (const Case& c : cases())
    for (int64_t n : {1, 4, 16, 33}) check_case(c, GetParam(), n, &pool, seed++);
}

TEST_P(LinearCpu, RejectsMalformedViews) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  OwnedWeights w = random_weights(Format::mxfp4, 4, 64, 7);
  std::vector<float> x(64), y(4);
  WeightView bad = w.view;
  bad.cols = 48;  // not a multiple of 32
  bad.name = "layers.0.ffn.experts.3.w1";
  try {
    fn()(bad, x.data(), 1, y.data(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.3.w1"), std::string::npos) << e.what();
  }
  bad = w.view;
  bad.scales = nullptr;
  EXPECT_THROW(fn()(bad, x.data(), 1, y.data(), nullptr), Error);
  bad = w.view;
  bad.format = Format::int_index;
  EXPECT_THROW(fn()(bad, x.data(), 1, y.data(), nullptr), Error);
}

TEST_P(LinearCpu, Fp4IsExactWhenActivationsAreOnTheIntGrid) {
  // x_j = k_j * 2^s with integer |k_j| <= qmax and each block's amax exactly
  // qmax * 2^s (qmax = 32767 for the int16 kernels, else 127): the int8 or
  // int16 quantization is lossless, so the FP4 paths must then meet the f32
  // budget (this catches scale mistakes far below the rounding noise; the
  // exact kernels meet it whatever x is).
  SKIP_UNLESS_RUNNABLE(GetParam());
  const float qmax = GetParam().acts == Fp4Acts::int16 ? 32767.0f : 127.0f;
  uint64_t seed = 500;
  for (const Case& c : cases()) {
    if (c.format != Format::mxfp4 && c.format != Format::nvfp4) continue;
    for (int64_t n : {1, 3, 9}) {
      SCOPED_TRACE(describe(c, n, GetParam()));
      OwnedWeights w = random_weights(c.format, c.rows, c.cols, seed++);
      std::vector<float> g(size_t(n * c.cols));
      random_normal(g.data(), int64_t(g.size()), seed++);
      std::vector<float> x(g.size());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < c.cols; b += 32) {  // the kernels' blocks: per token
          const size_t base = size_t(t * c.cols + b), k = size_t(b / 32 + t);
          const float scale = std::ldexp(1.0f, int(k % 7) - 3);
          for (size_t j = base; j < base + size_t(std::min<int64_t>(32, c.cols - b)); ++j)
            x[j] = std::clamp(std::nearbyint(g[j] * (qmax / 3.0f)), -qmax, qmax) * scale;
          x[base + k % 16] = (k % 2 ? -qmax : qmax) * scale;
        }
      std::vector<float> y(size_t(n * c.rows)), ref(y.size());
      fn()(w.view, x.data(), n, y.data(), nullptr);
      linear_ref(w.view, x.data(), n, ref.data(), nullptr);
      EXPECT_LE(rel_l2(y, ref), 1e-5);
    }
  }
}

TEST_P(LinearCpu, RowsHonourTokenIndexAndRowsOut) {
  // linear_rows as the fused MoE calls it: tokens picked through
  // token_index, results scaled by alpha and accumulated into rows picked by
  // y_index (repeats accumulate in token order), on a row range that is not
  // the whole matrix. Reference: linear_ref per token, combined here.
  const Variant v = GetParam();
  SKIP_UNLESS_RUNNABLE(v);
  const cpu::IsaKernels& k = cpu::isa_kernels(v.isa, v.acts);
  for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16}) {
    SCOPED_TRACE(std::string(format_name(f)) + " " + variant_name(v));
    // n = 20 prepared tokens: the AMX kernels' tile path (from 16), here
    // run on 6 of them through token_index.
    const int64_t rows = 37, cols = f == Format::nvfp4 ? 272 : 160, n = 20, ny = 4;
    OwnedWeights w = random_weights(f, rows, cols, 77);
    std::vector<float> x(size_t(n * cols));
    random_normal(x.data(), int64_t(x.size()), 78);
    // Tokens 8, 3, 3, 0, 5, 7 of x, into output rows 2, 0, 2, 3, 0, 1.
    const std::vector<int32_t> tok = {8, 3, 3, 0, 5, 7}, yi = {2, 0, 2, 3, 0, 1};
    const std::vector<float> alpha = {0.5f, -1.25f, 2.0f, 1.0f, 0.75f, -0.5f};
    const x86::RawWeights raw = cpu::raw_weights(w.view);
    const x86::ActsClass cls = k.acts_class(raw.kind, n);
    cpu::ScratchBuffer buf;
    x86::PreparedActs acts = cpu::prepare_acts(k, cls, x.data(), n, cols, buf, nullptr);
    acts.token_index = tok.data();
    acts.n = int64_t(tok.size());
    std::vector<float> y(size_t(ny * rows), 0.25f), want = y;
    const int64_t r0 = 5, r1 = 31;  // a row range, not the whole matrix
    k.linear_rows(raw, r0, r1, acts, x86::RowsOut{y.data(), rows, alpha.data(), true, yi.data()});
    // The same rounding as the kernel's (int8 / int16 blocks for FP4 in
    // those modes).
    std::vector<float> xr = x;
    test::round_like_kernel(xr, cols, v.isa, v.acts, w.view);
    std::vector<float> dot(static_cast<size_t>(rows));
    for (size_t i = 0; i < tok.size(); ++i) {
      linear_ref(w.view, xr.data() + tok[i] * cols, 1, dot.data(), nullptr);
      for (int64_t r = r0; r < r1; ++r) want[size_t(yi[i] * rows + r)] += alpha[i] * dot[size_t(r)];
    }
    for (int64_t t = 0; t < ny; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = size_t(t * rows + r);
        if (r < r0 || r >= r1) {
          EXPECT_EQ(y[i], 0.25f) << "row " << r << " outside the range was written";
        } else {
          EXPECT_NEAR(y[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << "output " << t << " row " << r;
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernel, LinearCpu,
                         NIBBLE_ALL_KERNEL_VARIANTS);

TEST(LinearCpu, ZeroAndConstantBlocksStayExact) {
  // A block of zero activations has amax 0 (scale 0, no division by zero);
  // a constant block quantizes exactly.
  for (auto [isa, acts] : {std::pair{CpuIsa::avx2, Fp4Acts::int8}, std::pair{CpuIsa::avx512, Fp4Acts::int8},
                           std::pair{CpuIsa::avx2, Fp4Acts::int16}}) {
    if (!isa_available(isa)) continue;
    for (Format f : {Format::mxfp4, Format::nvfp4}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + fp4_acts_name(acts) + " " + format_name(f));
      OwnedWeights w = random_weights(f, 9, 96, 3);
      std::vector<float> x(96, 0.0f);
      for (int j = 32; j < 64; ++j) x[size_t(j)] = 0.75f;
      std::vector<float> y(9), ref(9);
      linear_for_isa(isa, acts)(w.view, x.data(), 1, y.data(), nullptr);
      linear_ref(w.view, x.data(), 1, ref.data(), nullptr);
      for (int r = 0; r < 9; ++r) EXPECT_NEAR(y[size_t(r)], ref[size_t(r)], 1e-6 * (1 + std::fabs(ref[size_t(r)])));
    }
  }
}

TEST(LinearCpu, ExactMxfp4DecodesEveryScaleExactly) {
  // Row i holds every E2M1 code in both blocks of its 64 columns, with
  // UE8M0 scales e = i + 1 and 253 - e (1..252: the SIMD kernels take e = 0,
  // 2^-127, as 0, simd_avx512.h; above 252 a weight overflows and inf x 0
  // would be NaN). Each token's x is one-hot, so y is one weight times 1 plus
  // signed zeros: bitwise that weight as dequantize_row gives it, whatever
  // the summation order. 1, 5 and 64 tokens take each kernel's one-token,
  // register-pass and (AVX2) decoded-chunk paths.
  const int64_t rows = 252, cols = 64;
  OwnedWeights w = random_weights(Format::mxfp4, rows, cols, 5);
  ASSERT_EQ(w.data.size(), size_t(rows * cols / 2));
  ASSERT_EQ(w.scales.size(), size_t(rows * 2));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols / 2; ++j)  // codes 2j, 2j + 1: all 16 in each block
      w.data[size_t(r * cols / 2 + j)] = uint8_t(((2 * j) % 16) | (((2 * j + 1 + r) % 16) << 4));
    w.scales[size_t(2 * r)] = uint8_t(r + 1);
    w.scales[size_t(2 * r + 1)] = uint8_t(252 - r);
  }
  std::vector<float> wd(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(w.view, r, wd.data() + r * cols);
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (!isa_available(isa)) continue;
    for (int64_t n : {1, 5, 64}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + ", tokens " + std::to_string(n));
      std::vector<float> x(size_t(n * cols), 0.0f);
      for (int64_t t = 0; t < n; ++t) x[size_t(t * cols + (t * 13 + 7) % cols)] = 1.0f;
      std::vector<float> y(size_t(n * rows), NAN);
      linear_for_isa(isa, Fp4Acts::f32)(w.view, x.data(), n, y.data(), nullptr);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          // want is finite, so == is bitwise equality except that -0 and
          // +0 compare equal (a zero weight plus +0 products may give either).
          const float want = wd[size_t(r * cols + (t * 13 + 7) % cols)];
          EXPECT_EQ(y[size_t(t * rows + r)], want) << "token " << t << " row " << r;
        }
    }
  }
}

TEST(LinearCpu, Int16NonFiniteActivationsGiveNaN) {
  // A block of x holding inf or NaN gets step NaN in the int16 layout (its
  // integers cannot carry them): every output of that token is NaN, as the
  // exact kernels' would be non-finite, and the token beside it is
  // untouched: the f32 budget against its int16-rounded x (no crash, no
  // undefined float -> int16 conversion).
  if (!isa_available(CpuIsa::avx2)) GTEST_SKIP() << "no AVX2";
  for (Format f : {Format::mxfp4, Format::nvfp4}) {
    OwnedWeights w = random_weights(f, 5, 96, 4);
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> x(2 * 96);
      random_normal(x.data(), int64_t(x.size()), 9);
      x[40] = bad;  // token 0, block 1
      std::vector<float> y(10), ref(5);
      linear_for_isa(CpuIsa::avx2, Fp4Acts::int16)(w.view, x.data(), 2, y.data(), nullptr);
      std::vector<float> x1(x.begin() + 96, x.end());
      test::round_int_blocks(x1, 96, 32767.0f);
      linear_ref(w.view, x1.data(), 1, ref.data(), nullptr);
      for (int r = 0; r < 5; ++r)
        EXPECT_TRUE(std::isnan(y[size_t(r)])) << format_name(f) << " row " << r << ": " << y[size_t(r)];
      EXPECT_LE(rel_l2(std::vector<float>(y.begin() + 5, y.end()), ref), 1e-5) << format_name(f);
    }
  }
}

TEST(CpuIsa, ParseAndSupport) {
  EXPECT_EQ(parse_cpu_isa("ref"), CpuIsa::ref);
  EXPECT_EQ(parse_cpu_isa("auto"), best_cpu_isa(host_cpu_features()));
  EXPECT_THROW(parse_cpu_isa("sse9"), Error);
  CpuFeatures none;
  EXPECT_NE(cpu_isa_unsupported(CpuIsa::avx2, none).find("AVX2"), std::string::npos);
  EXPECT_EQ(best_cpu_isa(none), CpuIsa::ref);
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = avx2.f16c = true;
  EXPECT_EQ(best_cpu_isa(avx2), CpuIsa::avx2);
  EXPECT_NE(cpu_isa_unsupported(CpuIsa::avx512, avx2).find("VNNI"), std::string::npos);
}

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

TEST(AmxSplit, ThreeBf16PartsSumToXExactly) {
  // The AMX kernels' activation layout (kernels_x86.h, ActsClass::bf16x3):
  // per token the hi, mid and lo planes, each cols rounded up to 32 BF16.
  // hi + mid + lo must equal x exactly (summed here in f64, where three
  // BF16 numbers of neighbouring magnitudes add exactly), hi must be x
  // rounded to BF16 (nearest even, as ml_dtypes rounds), and the padding
  // zero: what makes the tile products exact.
  if (std::string why = amx_unsupported_here(); !why.empty()) GTEST_SKIP() << why;
  const cpu::IsaKernels& k = cpu::isa_kernels(CpuIsa::avx512, Fp4Acts::bf16x3);
  for (int64_t cols : {1, 31, 33, 100, 4096}) {
    const int64_t n = 3, kp = (cols + 31) / 32 * 32;
    std::vector<float> x(size_t(n * cols));
    random_normal(x.data(), int64_t(x.size()), uint64_t(cols));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::ldexp(x[i], int(i % 121) - 60);  // 2^-60 .. 2^60
      if (i % 17 == 0) x[i] = 0.0f;
      if (i % 19 == 0) x[i] = -1.5f;  // already BF16: mid = lo = 0
    }
    ASSERT_EQ(k.acts_stride(x86::ActsClass::bf16x3, cols), 3 * kp * 2);
    cpu::ScratchBuffer buf;
    const x86::PreparedActs a = cpu::prepare_acts(k, x86::ActsClass::bf16x3, x.data(), n, cols, buf, nullptr);
    auto bf16 = [](uint16_t b) {
      uint32_t u = uint32_t(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return double(f);
    };
    for (int64_t t = 0; t < n; ++t) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(a.data + t * a.stride);
      for (int64_t j = 0; j < kp; ++j) {
        const double hi = bf16(p[j]), mid = bf16(p[kp + j]), lo = bf16(p[2 * kp + j]);
        const double want = j < cols ? double(x[size_t(t * cols + j)]) : 0.0;
        ASSERT_EQ(hi + mid + lo, want) << "cols " << cols << " token " << t << " column " << j;
        // hi is x rounded to 8 significant bits, nearest even.
        if (want != 0) {
          int e;
          std::frexp(want, &e);
          const double ulp = std::ldexp(1.0, e - 8);
          ASSERT_EQ(hi, std::nearbyint(want / ulp) * ulp) << "column " << j;
        }
      }
    }
  }
}

TEST(AmxFp8, RowRangesAcrossScaleBandsAndExtremeScales) {
  // FP8 block-128 on tiles: a 16-row tile may straddle two 128-row scale
  // bands when a row range starts off the 16-row grid (linear_rows may be
  // called so), and scales whose exponent add would leave the normal range
  // (here 2^-118) take the f32 multiply instead. Against linear_ref, the
  // exact kernels' per-element budget (cols additions into C_hi, the small
  // C_lo ones) plus an absolute floor for the products the tile unit
  // flushes below 2^-126 (|w x| < 2^-118 * 448 * 4 per product here).
  if (std::string why = amx_unsupported_here(); !why.empty()) GTEST_SKIP() << why;
  const cpu::IsaKernels& k = cpu::isa_kernels(CpuIsa::avx512, Fp4Acts::bf16x3);
  const int64_t rows = 300, cols = 300, n = 20;
  OwnedWeights w = random_weights(Format::fp8_block128, rows, cols, 31, Fp8ScaleType::ue8m0);
  const int64_t tiles = (cols + 127) / 128;
  for (int64_t t = 0; t < tiles; ++t) w.scales[size_t(1 * tiles + t)] = 9;  // band 1: rows 128..255
  std::vector<float> x(size_t(n * cols));
  random_normal(x.data(), int64_t(x.size()), 32);
  const x86::RawWeights raw = cpu::raw_weights(w.view);
  ASSERT_EQ(k.acts_class(raw.kind, n), x86::ActsClass::bf16x3);
  cpu::ScratchBuffer buf;
  const x86::PreparedActs a = cpu::prepare_acts(k, x86::ActsClass::bf16x3, x.data(), n, cols, buf, nullptr);
  std::vector<float> y(size_t(n * rows), 0.0f), ref(size_t(n * rows));
  linear_ref(w.view, x.data(), n, ref.data(), nullptr);
  // Ranges across the band edges at 128 and 256, off the 16-row grid.
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 121}, {121, 140}, {140, 250}, {250, 300}})
    k.linear_rows(raw, r0, r1, a, x86::RowsOut{y.data(), rows, nullptr, false, nullptr});
  std::vector<double> wd = dequantized(w.view);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double mag = 0;
      for (int64_t j = 0; j < cols; ++j) mag += std::fabs(wd[size_t(r * cols + j)] * x[size_t(t * cols + j)]);
      const size_t i = size_t(t * rows + r);
      ASSERT_LE(std::fabs(double(y[i]) - ref[i]), (cols * (1 + 2 * 0x1p-8) + 8) * 0x1p-24 * mag + cols * 0x1p-126)
          << "token " << t << " row " << r << ": " << y[i] << " vs " << ref[i];
    }
}

}  // namespace
}  // namespace nibble
