// The fused SIMD MoE kernels (the default exact ones and the opt-in int8
// and int16 ones) against a reference built here from linear_ref on random
// layers of every expert format, with a shared expert in another format, batches
// 1..17 (tokens share experts: 16 experts, top-4), with and without threads.
//
// Budget: the default kernels round nothing but f32 sums: 1e-5 relative L2.
// Where the int8 (int16) kernels round activations (to int8 (int16) blocks
// before FP4 weights), the reference rounds them the same way (rounding.h,
// written from the definitions); what remains is f32 accumulation, 1e-4 relative L2
// (see moe_fixture_test.cpp for why not 1e-5).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/moe_cpu.h"
#include "kernels/random_weights.h"
#include "kernels/moe_routing.h"
#include "rounding.h"
#include "support/kernel_variant.h"
#include "support/random_moe_layer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

using Layer = test::RandomMoeLayer;

Layer random_layer(Format expert_fmt, Format shared_fmt, int64_t D, int64_t I, int64_t E, int64_t K,
                   uint64_t seed) {
  return test::random_moe_layer(expert_fmt, shared_fmt, D, I, E, K, seed);
}

// The layer with the kernels' activation rounding, from linear_ref.
std::vector<float> reference(const MoeWeights& w, const std::vector<float>& x, int64_t n, CpuIsa isa,
                             Fp4Acts acts) {
  const int64_t D = w.hidden, I = w.inter, E = w.n_experts, K = w.top_k;
  std::vector<float> logits(size_t(n * E)), y(size_t(n * D), 0.0f);
  linear_ref(w.gate, x.data(), n, logits.data(), nullptr);
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
    expert(w.shared, t, 1.0f);
  }
  return y;
}

using Variant = test::KernelVariant;

class MoeCpu : public ::testing::TestWithParam<Variant> {
 protected:
  MoeFn fn() const { return moe_for_isa(GetParam().isa, GetParam().acts); }
};

TEST_P(MoeCpu, MatchesReferenceOnRandomLayers) {
  const CpuIsa isa = GetParam().isa;
  const Fp4Acts acts = GetParam().acts;
  SKIP_UNLESS_RUNNABLE(GetParam());
  struct Config {
    Format expert, shared;
    int64_t D, I;
  };
  const Config configs[] = {
      {Format::mxfp4, Format::fp8_block128, 160, 96},  // DeepSeek-V4's mix
      {Format::nvfp4, Format::nvfp4, 144, 80},         // NVFP4 tails (not % 32)
      {Format::fp8_block128, Format::bf16, 200, 136},
      {Format::bf16, Format::mxfp4, 96, 64},
      {Format::f32, Format::f32, 40, 24},
  };
  ThreadPool pool(2);
  uint64_t seed = 1;
  for (const Config& c : configs) {
    Layer l = random_layer(c.expert, c.shared, c.D, c.I, 16, 4, seed);
    // 128 tokens give the AMX kernels experts with 16+ tokens (32 on
    // average), and others below that.
    for (int64_t n : {1, 2, 5, 17, 128}) {
      if (n == 128 && acts != Fp4Acts::bf16x3) continue;
      SCOPED_TRACE(std::string(format_name(c.expert)) + " + shared " + format_name(c.shared) +
                   " n=" + std::to_string(n));
      std::vector<float> x(size_t(n * c.D));
      random_normal(x.data(), int64_t(x.size()), seed + 99 + uint64_t(n));
      const std::vector<float> want = reference(l.w, x, n, isa, acts);
      const double budget = acts == Fp4Acts::int8 || acts == Fp4Acts::int16 ? 1e-4 : 1e-5;
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> y(want.size(), NAN);
        fn()(l.w, x.data(), nullptr, n, y.data(), p);
        EXPECT_LE(test::rel_l2(y, want), budget) << (p ? "threaded" : "single thread");
      }
    }
    seed += 1000;
  }
}

TEST_P(MoeCpu, OutputMayAliasInput) {
  // The residual stream is often updated in place: x is fully consumed
  // (prepared) before y is written.
  SKIP_UNLESS_RUNNABLE(GetParam());
  Layer l = random_layer(Format::mxfp4, Format::fp8_block128, 96, 64, 8, 2, 77);
  std::vector<float> x(size_t(3 * 96));
  random_normal(x.data(), int64_t(x.size()), 5);
  std::vector<float> y(x.size()), inplace = x;
  ThreadPool pool(2);
  fn()(l.w, x.data(), nullptr, 3, y.data(), &pool);
  fn()(l.w, inplace.data(), nullptr, 3, inplace.data(), &pool);
  EXPECT_EQ(inplace, y);
}

TEST_P(MoeCpu, RejectsBadLayers) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  Layer l = random_layer(Format::mxfp4, Format::mxfp4, 64, 32, 4, 2, 7);
  std::vector<float> x(64), y(64);
  MoeWeights w = l.w;
  w.experts.pop_back();  // 3 experts for a layer of 4
  EXPECT_THROW(fn()(w, x.data(), nullptr, 1, y.data(), nullptr), Error);
  w = l.w;
  w.shared.w3.format = Format::bf16;  // w1 FP4, w3 not: they share x
  w.shared.w3.name = "shared.w3";
  EXPECT_THROW(fn()(w, x.data(), nullptr, 1, y.data(), nullptr), Error);
}

INSTANTIATE_TEST_SUITE_P(Kernel, MoeCpu,
                         NIBBLE_ALL_KERNEL_VARIANTS);

}  // namespace
}  // namespace nibble
