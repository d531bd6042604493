// The scalar reference MoE layer, step by step as HF transformers'
// DeepseekV4SparseMoeBlock computes it: router logits (f32, through
// linear_ref) -> routing (moe_routing.h: torch.topk ties, +1e-20
// renormalisation) -> for each hit expert in ascending order, its tokens'
// clamped-SwiGLU outputs times their routing weights added in -> plus the
// shared expert. Every linear is linear_ref (f64 accumulation); activations
// are f32 between steps, as in HF's fp32 run. The oracle for moe_cpu.
// Batch-invariant by construction: every expert runs on one token at a time
// and y[t] is summed in expert order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/moe.h"
#include "kernels/moe_routing.h"
#include "util/error.h"

namespace nibble {

namespace {

// out[D] = down(silu(min(gate x, l)) * clamp(up x, -l, l)) for one token.
void expert_ref(const ExpertWeights& e, float limit, const float* x, float* out, ThreadPool* pool) {
  const int64_t inter = e.w1.rows;
  std::vector<float> g(static_cast<size_t>(inter)), u(static_cast<size_t>(inter));
  linear_ref(e.w1, x, 1, g.data(), pool);
  linear_ref(e.w3, x, 1, u.data(), pool);
  for (int64_t i = 0; i < inter; ++i) {
    float gi = g[size_t(i)], ui = u[size_t(i)];
    if (limit > 0) {
      gi = std::min(gi, limit);
      ui = std::clamp(ui, -limit, limit);
    }
    g[size_t(i)] = gi / (1.0f + std::exp(-gi)) * ui;
  }
  linear_ref(e.w2, g.data(), 1, out, pool);
}

// gpt-oss (HF GptOssExperts): gate_up = W13 x + b13; gate, up = rows 2i, 2i+1;
// gate = min(gate, l); up = clamp(up, -l, l); h = (up + 1) * gate * sigmoid(alpha * gate);
// out = W2 h + b2.
void expert_fused_ref(const ExpertWeights& e, float limit, float alpha, const float* x, float* out,
                      ThreadPool* pool) {
  const int64_t inter = e.w13.rows / 2;
  std::vector<float> gu(static_cast<size_t>(2 * inter)), h(static_cast<size_t>(inter));
  linear_ref(e.w13, x, 1, gu.data(), pool);
  for (int64_t i = 0; i < inter; ++i) {
    float g = gu[size_t(2 * i)] + (e.b13 ? e.b13[2 * i] : 0.0f);
    float u = gu[size_t(2 * i + 1)] + (e.b13 ? e.b13[2 * i + 1] : 0.0f);
    if (limit > 0) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    const float glu = g * (1.0f / (1.0f + std::exp(-(g * alpha))));
    h[size_t(i)] = (u + 1.0f) * glu;
  }
  linear_ref(e.w2, h.data(), 1, out, pool);
  if (e.b2)
    for (int64_t d = 0; d < e.w2.rows; ++d) out[d] += e.b2[d];
}

void run_expert_ref(const MoeWeights& w, const ExpertWeights& e, const float* x, float* out, ThreadPool* pool) {
  if (e.fused()) expert_fused_ref(e, w.swiglu_limit, w.swiglu_alpha, x, out, pool);
  else expert_ref(e, w.swiglu_limit, x, out, pool);
}

}  // namespace

void moe_ref(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
             ThreadPool* pool) {
  check_moe_weights(w);
  if (n <= 0) return;
  const int64_t D = w.hidden, E = w.n_experts, K = w.top_k;
  std::vector<float> logits(static_cast<size_t>(n * E));
  linear_ref(w.gate, x, n, logits.data(), pool);
  if (w.gate_bias)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < E; ++e) logits[size_t(t * E + e)] += w.gate_bias[e];
  MoeRouting routing;
  route_tokens(w, logits.data(), token_ids, n, &routing);

  std::fill(y, y + n * D, 0.0f);
  std::vector<float> out(static_cast<size_t>(D));
  // HF loops over the hit experts in ascending order and index_adds each
  // one's weighted output into its tokens' rows.
  for (int64_t e = 0; e < E; ++e)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = 0; k < K; ++k) {
        if (routing.experts[size_t(t * K + k)] != e) continue;
        run_expert_ref(w, w.experts[size_t(e)], x + t * D, out.data(), pool);
        const float wt = routing.weights[size_t(t * K + k)];
        for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[size_t(d)] * wt;
      }
  if (w.has_shared)
    for (int64_t t = 0; t < n; ++t) {
      run_expert_ref(w, w.shared, x + t * D, out.data(), pool);
      for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[size_t(d)];
    }
}

}  // namespace nibble
