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

}  // namespace

void moe_ref(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
             ThreadPool* pool) {
  check_moe_weights(w);
  if (n <= 0) return;
  const int64_t D = w.hidden, E = w.n_experts, K = w.top_k;
  std::vector<float> logits(static_cast<size_t>(n * E));
  linear_ref(w.gate, x, n, logits.data(), pool);
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
        expert_ref(w.experts[size_t(e)], w.swiglu_limit, x + t * D, out.data(), pool);
        const float wt = routing.weights[size_t(t * K + k)];
        for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[size_t(d)] * wt;
      }
  if (w.has_shared)
    for (int64_t t = 0; t < n; ++t) {
      expert_ref(w.shared, w.swiglu_limit, x + t * D, out.data(), pool);
      for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[size_t(d)];
    }
}

}  // namespace nibble
