// The INT4 (compressed-tensors pack-quantized) SIMD kernels, linear and MoE,
// on both ISA paths (AVX2 runs on AVX-512 hosts too), against sums computed
// here in f64 from the stored bits, decoded in this file (nibble k of a row
// at bits 4(k % 2) of byte k / 2, value (code - 8) * bf16(scale)), not by
// format/int4.cpp; and the MoE layer against moe_ref. The opt-in int8
// backends (int4_int8_*.cpp) likewise, against the same sums on x rounded to
// their int8 grid (rounding.h, from the definition) and, per element, within
// the rounding's worst case of the f32 x.
//
// Error bound, from the arithmetic (int4_f32_avx2.cpp / int4_f32_avx512.cpp):
// every q * x and q * s is exact, so the only roundings are the f32 adds of
// the summation tree, each of relative size <= 2^-24 on a partial sum whose
// magnitude is at most sum_j |w_j x_j|. A product passes through at most 4
// (AVX2) or 8 (AVX-512) adds of its step's temporary, 1 scale FMA, one
// accumulator add per step (cols / 64 or cols / 128), the horizontal sum (5)
// and the row's result scaling (1): depth <= cols / 64 + 15 on either ISA.
// So |y - exact| <= (cols / 64 + 15) 2^-24 sum_j |w_j x_j| (first order; the
// f64 reference's own error is ~2^-53 of the same sum). The int8 paths sum
// q q_x in int32 (exact), then per 32-column lane group one f32 product of
// two scales, one conversion (exact: |sum| < 2^24) and one FMA per step: a
// shallower tree, within the same bound on the rounded x. Against the f32 x
// the rounding adds at most sum_j |w_j| d_j / 2 (d_j: the step of x_j's block,
// amax / 127).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/element.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/moe_cpu.h"
#include "kernels/moe_routing.h"
#include "kernels/random_weights.h"
#include "rounding.h"
#include "support/random_moe_layer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

bool isa_available(CpuIsa isa) { return cpu_isa_unsupported(isa, host_cpu_features()).empty(); }

// Owned INT4 weights with any group size: random codes (all 16 drawn) and
// BF16 scales of either sign over a few octaves, from a splitmix64 stream.
struct Int4Weights {
  std::vector<uint8_t> packed;
  std::vector<uint16_t> scales;
  WeightView view;
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Int4Weights int4_weights(int64_t rows, int64_t cols, int64_t group, uint64_t seed) {
  Int4Weights w;
  w.packed.resize(size_t(rows * cols / 2));
  for (auto& b : w.packed) b = uint8_t(splitmix(seed));
  w.scales.resize(size_t(rows * cols / group));
  for (auto& s : w.scales) {
    const uint64_t r = splitmix(seed);
    const float v = std::ldexp(1.0f + float(r & 0xFF) / 256.0f, -9 + int((r >> 8) % 4)) * ((r >> 16) & 1 ? -1.0f : 1.0f);
    s = bf16_encode(v);  // exact: 8 significant bits
  }
  w.view.name = "experts.7.w2";
  w.view.format = Format::int4;
  w.view.rows = rows;
  w.view.cols = cols;
  w.view.group = group;
  w.view.data = w.packed.data();
  w.view.scales = reinterpret_cast<const uint8_t*>(w.scales.data());
  return w;
}

// Weight (r, c) decoded from the stored bits.
double weight_at(const WeightView& w, int64_t r, int64_t c) {
  const uint8_t byte = w.data[r * (w.cols / 2) + c / 2];
  const int code = (c % 2) ? byte >> 4 : byte & 0xF;
  uint16_t sb;
  std::memcpy(&sb, w.scales + 2 * (r * (w.cols / w.group) + c / w.group), 2);
  uint32_t bits = uint32_t(sb) << 16;
  float s;
  std::memcpy(&s, &bits, 4);
  return double(code - 8) * double(s);
}

void check_linear(const WeightView& w, CpuIsa isa, Fp4Acts acts, int64_t n, ThreadPool* pool, uint64_t seed) {
  SCOPED_TRACE(std::string(cpu_isa_name(isa)) + (acts == Fp4Acts::int8 ? "_int8" : "") + " [" +
               std::to_string(w.rows) + " x " + std::to_string(w.cols) + "] group " + std::to_string(w.group) +
               " n=" + std::to_string(n) + (pool ? " threaded" : ""));
  const bool int8 = acts == Fp4Acts::int8;
  // Only the opt-in backends round activations.
  ASSERT_EQ(cpu::isa_kernels(isa, acts).acts_class(cpu::raw_weights(w).kind, n),
            int8 ? x86::ActsClass::int8_int4 : x86::ActsClass::f32_int4);
  std::vector<float> x(size_t(n * w.cols));
  random_normal(x.data(), int64_t(x.size()), seed);
  std::vector<float> xr = x;  // what the kernel multiplies
  if (int8) test::round_int_blocks(xr, w.cols, 127.0f);
  std::vector<float> y(size_t(n * w.rows), NAN);
  linear_for_isa(isa, acts)(w, x.data(), n, y.data(), pool);
  const double depth = double(w.cols) / 64 + 15;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < w.rows; ++r) {
      double exact = 0, mag = 0, exact_f = 0, hard = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double wc = weight_at(w, r, c), p = wc * double(xr[size_t(t * w.cols + c)]);
        exact += p;
        mag += std::fabs(p);
        exact_f += wc * double(x[size_t(t * w.cols + c)]);
        hard += std::fabs(wc) * std::fabs(double(xr[size_t(t * w.cols + c)]) - x[size_t(t * w.cols + c)]);
      }
      const double got = y[size_t(t * w.rows + r)];
      ASSERT_LE(std::fabs(got - exact), depth * 0x1p-24 * mag + 1e-30)
          << "token " << t << " row " << r << ": " << got << " vs " << exact;
      if (int8) {
        // The rounding itself: |x_r - x| <= d / 2 per element (checked
        // here against the definition's own worst case).
        double half_steps = 0;
        for (int64_t b = 0; b < w.cols; b += 32) {
          double amax = 0;
          for (int64_t c = b; c < b + 32; ++c) amax = std::max(amax, std::fabs(double(x[size_t(t * w.cols + c)])));
          for (int64_t c = b; c < b + 32; ++c) half_steps += std::fabs(weight_at(w, r, c)) * amax / 127.0 / 2;
        }
        ASSERT_LE(hard, half_steps * 1.0001 + 1e-30);
        ASSERT_LE(std::fabs(got - exact_f), half_steps * 1.0001 + depth * 0x1p-24 * mag + 1e-30);
      }
    }
}

class Int4Cpu : public ::testing::TestWithParam<CpuIsa> {};

// Columns: one 32-column block, odd multiples of 32 (every tail of the 64- and
// 128-column steps), a wide row; rows not multiples of the row blocks (4, 8).
TEST_P(Int4Cpu, LinearMatchesExactSums) {
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  struct Shape {
    int64_t rows, cols, group;
  };
  const Shape shapes[] = {{1, 32, 32},  {7, 96, 32},   {13, 160, 32}, {33, 224, 32}, {9, 4128, 32},
                          {2, 7168, 32}, {11, 384, 64}, {5, 640, 128}, {3, 2080, 32}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    Int4Weights w = int4_weights(s.rows, s.cols, s.group, seed++);
    for (int64_t n = 1; n <= 9; ++n)
      for (Fp4Acts acts : {Fp4Acts::f32, Fp4Acts::int8}) check_linear(w.view, isa, acts, n, nullptr, seed++);
  }
}

TEST_P(Int4Cpu, LinearThreadedAndInt8Backends) {
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  ThreadPool pool(3);  // more threads than cores: uneven, preempted parts
  uint64_t seed = 100;
  for (int64_t rows : {61, 200}) {
    Int4Weights w = int4_weights(rows, 416, 32, seed++);
    for (int64_t n : {1, 4, 9}) {
      check_linear(w.view, isa, Fp4Acts::f32, n, &pool, seed++);
      check_linear(w.view, isa, Fp4Acts::int8, n, &pool, seed++);
    }
  }
}

TEST_P(Int4Cpu, LinearMatchesReferenceOnRandomWeights) {
  // random_weights' INT4 (Kimi K2's group 32) through linear_ref, the
  // planner's scalar reference: the same budget.
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  OwnedWeights w = random_weights(Format::int4, 37, 1056, 5);
  for (int64_t n : {1, 2, 3, 8}) {
    std::vector<float> x(size_t(n * 1056));
    random_normal(x.data(), int64_t(x.size()), 6 + uint64_t(n));
    std::vector<float> y(size_t(n * 37)), ref(y.size());
    linear_for_isa(isa)(w.view, x.data(), n, y.data(), nullptr);
    linear_ref(w.view, x.data(), n, ref.data(), nullptr);
    EXPECT_LE(test::rel_l2(y, ref), 1e-5) << "n=" << n;
  }
}

TEST_P(Int4Cpu, BatchInvariant) {
  // A token's output must not depend on the batch it comes in (the
  // summation order is fixed per (row, token)): bitwise equal to the token
  // run alone.
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  Int4Weights w = int4_weights(29, 2080, 32, 9);
  const int64_t n = 7;
  std::vector<float> x(size_t(n * 2080));
  random_normal(x.data(), int64_t(x.size()), 10);
  for (Fp4Acts acts : {Fp4Acts::f32, Fp4Acts::int8}) {
    std::vector<float> all(size_t(n * 29));
    linear_for_isa(isa, acts)(w.view, x.data(), n, all.data(), nullptr);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> one(29);
      linear_for_isa(isa, acts)(w.view, x.data() + t * 2080, 1, one.data(), nullptr);
      for (int64_t r = 0; r < 29; ++r)
        ASSERT_EQ(std::memcmp(&one[size_t(r)], &all[size_t(t * 29 + r)], 4), 0)
            << fp4_acts_name(acts) << " token " << t << " row " << r;
    }
  }
}

TEST_P(Int4Cpu, RejectsGroupsTheKernelsDoNotRun) {
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  Int4Weights w = int4_weights(4, 64, 16, 3);  // valid INT4, but 16 per scale
  std::vector<float> x(64), y(4);
  try {
    linear_for_isa(isa)(w.view, x.data(), 1, y.data(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.7.w2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("group size"), std::string::npos) << e.what();
  }
  Int4Weights good = int4_weights(4, 64, 32, 3);
  WeightView bad = good.view;
  bad.scales = nullptr;
  EXPECT_THROW(linear_for_isa(isa)(bad, x.data(), 1, y.data(), nullptr), Error);
}

// The MoE layer from linear_ref with the kernels' activation rounding (none
// for the exact backends, int8 blocks before INT4 weights in the int8 ones),
// as moe_cpu_test.cpp builds it: routing as moe_ref, experts in slot order,
// then the shared expert.
std::vector<float> moe_reference(const MoeWeights& w, const std::vector<float>& x, int64_t n, CpuIsa isa,
                                 Fp4Acts acts) {
  const int64_t D = w.hidden, I = w.inter, E = w.n_experts, K = w.top_k;
  std::vector<float> logits(size_t(n * E)), y(size_t(n * D), 0.0f);
  linear_ref(w.gate, x.data(), n, logits.data(), nullptr);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) logits[size_t(t * E + e)] += w.gate_bias ? w.gate_bias[e] : 0.0f;
  MoeRouting r;
  route_tokens(w, logits.data(), nullptr, n, &r);
  auto expert = [&](const ExpertWeights& ew, int64_t t, float wt) {
    std::vector<float> xt(x.begin() + t * D, x.begin() + (t + 1) * D);
    test::round_like_kernel(xt, D, isa, acts, ew.w1);
    std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), o(static_cast<size_t>(D));
    linear_ref(ew.w1, xt.data(), 1, g.data(), nullptr);
    linear_ref(ew.w3, xt.data(), 1, u.data(), nullptr);
    for (int64_t i = 0; i < I; ++i) {
      const float gi = std::min(g[size_t(i)], w.swiglu_limit);
      const float ui = std::clamp(u[size_t(i)], -w.swiglu_limit, w.swiglu_limit);
      g[size_t(i)] = gi / (1.0f + std::exp(-gi)) * ui;
    }
    test::round_like_kernel(g, I, isa, acts, ew.w2);
    linear_ref(ew.w2, g.data(), 1, o.data(), nullptr);
    for (int64_t d = 0; d < D; ++d) y[size_t(t * D + d)] += o[size_t(d)] * wt;
  };
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k)
      expert(w.experts[size_t(r.experts[size_t(t * K + k)])], t, r.weights[size_t(t * K + k)]);
    if (w.has_shared) expert(w.shared, t, 1.0f);
  }
  return y;
}

TEST_P(Int4Cpu, MoeMatchesReference) {
  // Kimi K2's mix: INT4 routed experts, a BF16 shared expert and router; and
  // an INT4 shared expert. D and I multiples of 32 but not of 64 / 128.
  const CpuIsa isa = GetParam();
  if (!isa_available(isa)) GTEST_SKIP() << "CPU lacks " << cpu_isa_name(isa);
  ThreadPool pool(2);
  struct Config {
    Format shared;
    int64_t D, I;
  };
  uint64_t seed = 40;
  for (const Config& c : {Config{Format::bf16, 160, 96}, Config{Format::int4, 224, 32}}) {
    test::RandomMoeLayer l = test::random_moe_layer(Format::int4, c.shared, c.D, c.I, 16, 4, seed);
    for (int64_t n : {1, 2, 5, 9}) {
      SCOPED_TRACE("shared " + std::string(format_name(c.shared)) + " n=" + std::to_string(n));
      std::vector<float> x(size_t(n * c.D));
      random_normal(x.data(), int64_t(x.size()), seed + uint64_t(n));
      std::vector<float> exact(x.size());
      moe_ref(l.w, x.data(), nullptr, n, exact.data(), nullptr);
      for (Fp4Acts acts : {Fp4Acts::f32, Fp4Acts::int8}) {
        const std::vector<float> want = moe_reference(l.w, x, n, isa, acts);
        if (acts == Fp4Acts::f32) {
          EXPECT_LE(test::rel_l2(want, exact), 1e-6);  // the reference built here is moe_ref's layer
        }
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> y(x.size(), NAN);
          moe_for_isa(isa, acts)(l.w, x.data(), nullptr, n, y.data(), p);
          // f32 sums only: moe_cpu_test.cpp's budgets (1e-4 where x and h
          // are rounded: its note on near-clamp SwiGLU inputs).
          EXPECT_LE(test::rel_l2(y, want), acts == Fp4Acts::int8 ? 1e-4 : 1e-5)
              << fp4_acts_name(acts) << (p ? " threaded" : "");
        }
      }
    }
    seed += 1000;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, Int4Cpu, ::testing::Values(CpuIsa::avx2, CpuIsa::avx512),
                         [](const auto& info) { return std::string(cpu_isa_name(info.param)); });

}  // namespace
}  // namespace nibble
