#include "kernels/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "util/error.h"

namespace nibble {

void moe_scores(ScoringFunc f, const float* logits, int64_t n_experts, float* scores) {
  switch (f) {
    case ScoringFunc::softmax: {
      float m = -INFINITY;
      for (int64_t e = 0; e < n_experts; ++e) m = std::max(m, logits[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < n_experts; ++e) sum += (scores[e] = std::exp(logits[e] - m));
      for (int64_t e = 0; e < n_experts; ++e) scores[e] /= sum;
      return;
    }
    case ScoringFunc::sigmoid:
      for (int64_t e = 0; e < n_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      return;
    case ScoringFunc::sqrtsoftplus:
      for (int64_t e = 0; e < n_experts; ++e) {
        const float x = logits[e];
        scores[e] = std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x)));
      }
      return;
    case ScoringFunc::topk_softmax:  // scores are the logits; the softmax comes after selection
      std::copy(logits, logits + n_experts, scores);
      return;
  }
}

void torch_topk_indices(const float* key, int64_t n, int64_t k, int32_t* out) {
  // Mirrors aten/src/ATen/native/cpu/SortingKernel.cpp (topk_impl_loop):
  // the pairs start in index order and go through the same std algorithm
  // with the same comparator, so equal keys come out as torch's do.
  using Elem = std::pair<float, int64_t>;
  thread_local std::vector<Elem> queue;
  queue.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) queue[size_t(i)] = {key[i], i};
  auto greater = [](const Elem& x, const Elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  if (k * 64 <= n) std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  else std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greater);
  for (int64_t i = 0; i < k; ++i) out[i] = int32_t(queue[size_t(i)].second);
}

namespace {

void check_expert(const ExpertWeights& e, const MoeWeights& w, const char* what, int64_t idx) {
  auto bad = [&](const WeightView& v, const char* role, int64_t rows, int64_t cols) {
    if (v.rows != rows || v.cols != cols)
      fail("MoE ", what, idx >= 0 ? " " + std::to_string(idx) : std::string(), " ", role, " (tensor ",
           v.name, ") is [", v.rows, ", ", v.cols, "], expected [", rows, ", ", cols, "]");
  };
  if (e.fused()) {
    bad(e.w13, "gate_up", 2 * w.inter, w.hidden);
  } else {
    bad(e.w1, "w1", w.inter, w.hidden);
    bad(e.w3, "w3", w.inter, w.hidden);
  }
  bad(e.w2, "w2", w.hidden, w.inter);
}

// HF DeepseekV3TopkRouter: group_scores = key.view(G, E/G).topk(2).values
// .sum(); the topk_group groups of torch.topk(group_scores, sorted=False)
// are kept and every other expert's key becomes -inf (masked_fill), so the
// final top-k (torch.topk again) picks only from kept groups.
void mask_to_top_groups(const MoeWeights& w, float* key) {
  const int64_t G = w.n_group, per = w.n_experts / G;
  thread_local std::vector<float> group_score;
  thread_local std::vector<int32_t> kept;
  group_score.resize(size_t(G));
  kept.resize(size_t(w.topk_group));
  for (int64_t g = 0; g < G; ++g) {
    int32_t top2[2];
    torch_topk_indices(key + g * per, per, 2, top2);
    group_score[size_t(g)] = key[g * per + top2[0]] + key[g * per + top2[1]];
  }
  torch_topk_indices(group_score.data(), G, w.topk_group, kept.data());
  std::vector<bool> keep(size_t(G), false);
  for (int32_t g : kept) keep[size_t(g)] = true;
  for (int64_t g = 0; g < G; ++g)
    if (!keep[size_t(g)]) std::fill(key + g * per, key + (g + 1) * per, -INFINITY);
}

}  // namespace

void check_moe_weights(const MoeWeights& w) {
  if (w.hidden <= 0 || w.inter <= 0 || w.n_experts <= 0)
    fail("MoE layer: bad dimensions hidden ", w.hidden, ", inter ", w.inter, ", experts ", w.n_experts);
  if (w.top_k <= 0 || w.top_k > w.n_experts)
    fail("MoE layer: top_k ", w.top_k, " must be in [1, ", w.n_experts, "]");
  if (int64_t(w.experts.size()) != w.n_experts)
    fail("MoE layer: ", w.experts.size(), " experts given, config says ", w.n_experts);
  if (w.gate.rows != w.n_experts || w.gate.cols != w.hidden)
    fail("MoE router (tensor ", w.gate.name, ") is [", w.gate.rows, ", ", w.gate.cols, "], expected [",
         w.n_experts, ", ", w.hidden, "]");
  if (w.n_group > 1 && (w.n_experts % w.n_group != 0 || w.n_experts / w.n_group < 2 || w.topk_group < 1 ||
                       w.top_k > std::min(w.topk_group, w.n_group) * (w.n_experts / w.n_group)))
    fail("MoE layer: ", w.n_experts, " experts in ", w.n_group, " groups, top ", w.topk_group, " groups, top_k ",
         w.top_k, " do not fit (groups of >= 2 experts that hold top_k)");
  if (w.tid2eid && w.tid2eid_rows <= 0) fail("MoE layer: hash-routing table with ", w.tid2eid_rows, " rows");
  for (int64_t e = 0; e < w.n_experts; ++e) check_expert(w.experts[size_t(e)], w, "expert", e);
  if (w.has_shared) check_expert(w.shared, w, "shared expert", -1);
}

void route_tokens(const MoeWeights& w, const float* logits, const int32_t* token_ids, int64_t n,
                  MoeRouting* out) {
  const int64_t E = w.n_experts, K = w.top_k;
  out->n = n;
  out->top_k = K;
  out->experts.resize(size_t(n * K));
  out->weights.resize(size_t(n * K));
  if (w.tid2eid && !token_ids) fail("MoE layer with hash routing (tid2eid) needs token ids");
  thread_local std::vector<float> scores, key;
  scores.resize(size_t(E));
  key.resize(size_t(E));
  for (int64_t t = 0; t < n; ++t) {
    moe_scores(w.scoring, logits + t * E, E, scores.data());
    int32_t* idx = out->experts.data() + t * K;
    if (w.tid2eid) {
      const int64_t tok = token_ids[t];
      if (tok < 0 || tok >= w.tid2eid_rows)
        fail("MoE hash routing: token id ", tok, " is outside tid2eid (", w.tid2eid_rows, " rows)");
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = w.tid2eid_is_i64 ? static_cast<const int64_t*>(w.tid2eid)[tok * K + k]
                                           : static_cast<const int32_t*>(w.tid2eid)[tok * K + k];
        if (e < 0 || e >= E) fail("MoE hash routing: tid2eid[", tok, "][", k, "] = ", e, " is not an expert of ", E);
        idx[k] = int32_t(e);
      }
    } else {
      for (int64_t e = 0; e < E; ++e) key[size_t(e)] = scores[size_t(e)] + (w.bias ? w.bias[e] : 0.0f);
      if (w.n_group > 1 && w.topk_group < w.n_group) mask_to_top_groups(w, key.data());
      torch_topk_indices(key.data(), E, K, idx);
    }
    float* wt = out->weights.data() + t * K;
    if (w.scoring == ScoringFunc::topk_softmax) {
      // HF GptOssTopKRouter: topk(logits) (sorted, largest first), then
      // softmax over the k values: exp(v - max) / sum, in f32.
      std::sort(idx, idx + K, [&](int32_t a, int32_t b) {
        return scores[size_t(a)] > scores[size_t(b)] || (scores[size_t(a)] == scores[size_t(b)] && a < b);
      });
      const float m = scores[size_t(idx[0])];
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += (wt[k] = std::exp(scores[size_t(idx[k])] - m));
      for (int64_t k = 0; k < K; ++k) wt[k] = wt[k] / sum * w.routed_scaling;
      continue;
    }
    // HF: weights = scores.gather(idx); weights / (weights.sum() + 1e-20);
    // * routed_scaling_factor, all in f32.
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += (wt[k] = scores[size_t(idx[k])]);
    for (int64_t k = 0; k < K; ++k) {
      if (w.norm_topk_prob) wt[k] = wt[k] / (sum + 1e-20f);
      wt[k] *= w.routed_scaling;
    }
  }
}

}  // namespace nibble
