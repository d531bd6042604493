// The gpt-oss flavour of the MoE kernels (kernels/moe.h: one gate_up matrix
// with gate / up rows interleaved, expert biases, a router bias, top-k then
// softmax over the chosen logits, h = (clamp(up) + 1) * g * sigmoid(alpha g)
// with g = min(gate, limit)) against a reference written here from
// linear_ref and the definitions in transformers' GptOssTopKRouter /
// GptOssExperts, on random layers of awkward sizes (D = 96 and 160, I = 64
// and 96, 7 experts, top-2 and top-3), batches 1..13, with and without threads.
// Budget: f32 sums in another order, 1e-5 relative L2 (as moe_cpu_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/moe_cpu.h"
#include "kernels/moe_routing.h"
#include "kernels/random_weights.h"
#include "device/device.h"
#include "rounding.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

struct Layer {
  std::vector<OwnedWeights> owned;  // w13, w2 per expert
  OwnedWeights router;
  std::vector<float> router_bias, b13, b2;
  MoeWeights w;
};

Layer gpt_oss_layer(Format f, int64_t D, int64_t I, int64_t E, int64_t K, uint64_t seed) {
  Layer l;
  l.router = random_weights(Format::bf16, E, D, seed);
  l.router_bias.resize(size_t(E));
  random_normal(l.router_bias.data(), E, seed + 1, 0.5f);
  l.b13.resize(size_t(E * 2 * I));
  random_normal(l.b13.data(), int64_t(l.b13.size()), seed + 2, 0.5f);
  l.b2.resize(size_t(E * D));
  random_normal(l.b2.data(), int64_t(l.b2.size()), seed + 3, 0.1f);
  for (int64_t e = 0; e < E; ++e) {
    l.owned.push_back(random_weights(f, 2 * I, D, seed + 10 + 2 * uint64_t(e)));
    l.owned.push_back(random_weights(f, D, I, seed + 11 + 2 * uint64_t(e)));
  }
  MoeWeights& w = l.w;
  w.hidden = D;
  w.inter = I;
  w.n_experts = E;
  w.top_k = K;
  w.gate = l.router.view;
  w.gate_bias = l.router_bias.data();
  w.scoring = ScoringFunc::topk_softmax;
  w.norm_topk_prob = false;
  w.swiglu_alpha = 1.702f;
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights ew;
    ew.w13 = l.owned[size_t(2 * e)].view;
    ew.w2 = l.owned[size_t(2 * e + 1)].view;
    ew.b13 = l.b13.data() + e * 2 * I;
    ew.b2 = l.b2.data() + e * D;
    w.experts.push_back(ew);
  }
  return l;
}

// transformers' GptOss MLP, one token at a time.
std::vector<float> reference(const MoeWeights& w, const std::vector<float>& x, int64_t n) {
  const int64_t D = w.hidden, I = w.inter, E = w.n_experts, K = w.top_k;
  std::vector<float> y(size_t(n * D), 0.0f), logits(static_cast<size_t>(E)), gu(static_cast<size_t>(2 * I)),
      h(static_cast<size_t>(I)), o(static_cast<size_t>(D));
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * D;
    linear_ref(w.gate, xt, 1, logits.data(), nullptr);
    for (int64_t e = 0; e < E; ++e) logits[size_t(e)] += w.gate_bias[e];
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(double(logits[size_t(order[size_t(k)])] - logits[size_t(order[0])]));
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = order[size_t(k)];
      const float wt = float(std::exp(double(logits[size_t(e)] - logits[size_t(order[0])])) / sum);
      const ExpertWeights& ew = w.experts[size_t(e)];
      linear_ref(ew.w13, xt, 1, gu.data(), nullptr);
      for (int64_t i = 0; i < I; ++i) {
        const double g = std::min(double(gu[size_t(2 * i)] + ew.b13[2 * i]), double(w.swiglu_limit));
        const double u = std::clamp(double(gu[size_t(2 * i + 1)] + ew.b13[2 * i + 1]), -double(w.swiglu_limit),
                                    double(w.swiglu_limit));
        h[size_t(i)] = float((u + 1.0) * g / (1.0 + std::exp(-double(w.swiglu_alpha) * g)));
      }
      linear_ref(ew.w2, h.data(), 1, o.data(), nullptr);
      for (int64_t d = 0; d < D; ++d) y[size_t(t * D + d)] += (o[size_t(d)] + ew.b2[d]) * wt;
    }
  }
  return y;
}

TEST(MoeGptOss, EveryKernelMatchesTheDefinition) {
  struct Config {
    Format f;
    int64_t D, I, K;
    float limit;
  };
  const Config configs[] = {
      {Format::mxfp4, 96, 64, 2, 7.0f},   // published limit
      {Format::mxfp4, 160, 96, 3, 0.7f},  // a tight clamp: both sides of up and gate's top act
      {Format::nvfp4, 96, 64, 2, 0.7f},
      {Format::bf16, 160, 64, 2, 0.7f},
  };
  std::vector<std::pair<std::string, MoeFn>> kernels = {{"ref", moe_ref}};
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_isa_unsupported(isa, host_cpu_features()).empty()) kernels.push_back({cpu_isa_name(isa), moe_for_isa(isa)});
  ThreadPool pool(2);
  uint64_t seed = 5;
  for (const Config& c : configs) {
    Layer l = gpt_oss_layer(c.f, c.D, c.I, 7, c.K, seed);
    l.w.swiglu_limit = c.limit;
    check_moe_weights(l.w);
    for (int64_t n : {1, 4, 13}) {
      std::vector<float> x(size_t(n * c.D));
      random_normal(x.data(), int64_t(x.size()), seed + 77 + uint64_t(n));
      const std::vector<float> want = reference(l.w, x, n);
      for (const auto& [name, fn] : kernels)
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          SCOPED_TRACE(name + " " + format_name(c.f) + " n=" + std::to_string(n) + (p ? " threaded" : ""));
          std::vector<float> y(want.size(), NAN);
          fn(l.w, x.data(), nullptr, n, y.data(), p);
          EXPECT_LE(test::rel_l2(y, want), 1e-5);
        }
    }
    seed += 100;
  }
}

// A fused expert of the wrong shape is named.
TEST(MoeGptOss, MisshapenExpertIsNamed) {
  Layer l = gpt_oss_layer(Format::mxfp4, 96, 64, 4, 2, 9);
  l.w.experts[2].w13.rows -= 2;
  l.w.experts[2].w13.name = "model.layers.0.mlp.experts.gate_up_proj[2]";
  try {
    check_moe_weights(l.w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_up_proj[2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
