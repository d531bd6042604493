// The scalar reference MoE layer, step by step as in HF transformers'
// DeepseekV4SparseMoeBlock: router -> selection -> per-token experts ->
// weighted sum + shared expert. One token at a time, every linear through
// linear_ref; the fused kernels are tested against it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/moe.h"
#include "util/error.h"

namespace nibble {

namespace {

float score(ScoringFunc f, float logit) {
  switch (f) {
    case ScoringFunc::sigmoid: return 1.0f / (1.0f + std::exp(-logit));
    case ScoringFunc::sqrtsoftplus: {
      // torch's softplus switches to the identity above 20.
      float sp = logit > 20.0f ? logit : std::log1p(std::exp(logit));
      return std::sqrt(sp);
    }
    case ScoringFunc::softmax: break;
  }
  return logit;  // softmax is normalised over all experts by the caller
}

// y[D] += weight * SwiGLU expert(x[D]).
void expert_ref(const ExpertWeights& e, float limit, const float* x, float weight, float* y,
                ThreadPool* pool) {
  const int64_t inter = e.w1.rows, hidden = e.w2.rows;
  std::vector<float> g(static_cast<size_t>(inter)), u(static_cast<size_t>(inter)), out(static_cast<size_t>(hidden));
  linear_ref(e.w1, x, 1, g.data(), pool);
  linear_ref(e.w3, x, 1, u.data(), pool);
  for (int64_t i = 0; i < inter; ++i) {
    float gi = g[size_t(i)], ui = u[size_t(i)];
    if (limit > 0) {
      gi = std::min(gi, limit);
      ui = std::clamp(ui, -limit, limit);
    }
    g[size_t(i)] = gi / (1.0f + std::exp(-gi)) * ui;  // silu(g) * u
  }
  linear_ref(e.w2, g.data(), 1, out.data(), pool);
  for (int64_t d = 0; d < hidden; ++d) y[d] += weight * out[size_t(d)];
}

}  // namespace

void moe_ref(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
             ThreadPool* pool) {
  const int64_t D = w.hidden, E = w.n_experts, K = w.top_k;
  std::vector<float> logits(static_cast<size_t>(E)), scores(static_cast<size_t>(E));
  std::vector<int64_t> idx(static_cast<size_t>(K));
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * D;
    float* yt = y + t * D;
    linear_ref(w.gate, xt, 1, logits.data(), pool);
    for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = score(w.scoring, logits[size_t(e)]);
    if (w.scoring == ScoringFunc::softmax) {
      float m = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (auto& s : scores) sum += (s = std::exp(s - m));
      for (auto& s : scores) s = float(s / sum);
    }

    if (w.tid2eid) {
      if (!token_ids) fail("MoE layer with hash routing needs token ids");
      int64_t tok = token_ids[t];
      if (tok < 0 || tok >= w.tid2eid_rows)
        fail("token id ", tok, " is outside the hash-routing table (", w.tid2eid_rows, " rows)");
      for (int64_t k = 0; k < K; ++k) {
        int64_t e = w.tid2eid_is_i64 ? static_cast<const int64_t*>(w.tid2eid)[tok * K + k]
                                     : static_cast<const int32_t*>(w.tid2eid)[tok * K + k];
        if (e < 0 || e >= E) fail("tid2eid[", tok, "] names expert ", e, " of ", E);
        idx[size_t(k)] = e;
      }
    } else {
      // Top-k of score + bias; equal keys keep the lower expert index first.
      std::vector<int64_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      auto key = [&](int64_t e) { return scores[size_t(e)] + (w.bias ? w.bias[e] : 0.0f); };
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return key(a) > key(b); });
      std::copy(order.begin(), order.begin() + K, idx.begin());
    }

    std::vector<float> weight(static_cast<size_t>(K));
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += (weight[size_t(k)] = scores[size_t(idx[size_t(k)])]);
    for (int64_t k = 0; k < K; ++k) {
      if (w.norm_topk_prob) weight[size_t(k)] = float(weight[size_t(k)] / (sum + 1e-20));
      weight[size_t(k)] *= w.routed_scaling;
    }

    std::fill(yt, yt + D, 0.0f);
    for (int64_t k = 0; k < K; ++k)
      expert_ref(w.experts[size_t(idx[size_t(k)])], w.swiglu_limit, xt, weight[size_t(k)], yt, pool);
    if (w.has_shared) expert_ref(w.shared, w.swiglu_limit, xt, 1.0f, yt, pool);
  }
}

}  // namespace nibble
