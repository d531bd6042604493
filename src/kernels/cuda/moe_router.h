// The MoE routing steps on the GPU, around the grouped expert GEMM
// (moe_w4a16.h): router scores and top-k (or hash routing) from the router
// logits, grouping the assignments by expert, and the weighted combine of
// the experts' outputs. The logits themselves come from the BF16 router
// matrix through linear_mma (f32 out). Semantics are moe_routing.h's (HF
// transformers' DeepseekV4TopKRouter / HashRouter): scores by softmax,
// sigmoid or sqrt(softplus) (threshold 20), selection by top-k of score +
// bias or by tid2eid[token], weights = selected scores / (sum + 1e-20) when
// normalised, times routed_scaling.
//
// Every kernel is deterministic (no atomics on values): the same inputs give
// the same bits whatever the batch around them, the property the CPU
// kernels keep (batch invariance).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe.h"

namespace nibble {

struct RouteDeviceArgs {
  const float* logits = nullptr;      // [n, n_experts] f32
  const float* bias = nullptr;        // [n_experts] selection-only bias, or null
  const int32_t* token_ids = nullptr; // [n], hash routing only
  const void* tid2eid = nullptr;      // [tid2eid_rows, top_k] i64 or i32, or null (top-k routing)
  bool tid2eid_is_i64 = true;
  int64_t tid2eid_rows = 0;
  int64_t n = 0, n_experts = 0, top_k = 0;
  ScoringFunc scoring = ScoringFunc::sqrtsoftplus;
  bool norm_topk_prob = true;
  float routed_scaling = 1.0f;
  int32_t* experts = nullptr;         // [n, top_k] out, in descending key order (hash: table order)
  float* weights = nullptr;           // [n, top_k] out
  int32_t* error = nullptr;           // [1]: left 0, or set to 1 + the first token whose id or table entry is bad
  void* stream = nullptr;             // cudaStream_t
};
// n_experts <= 4096, top_k <= 32. No host synchronisation.
void moe_route_launch(const RouteDeviceArgs& a);

// experts [n, top_k] -> offsets [n_experts + 1], x_rows [n * top_k] (the
// token of each assignment, grouped by expert, tokens ascending within an
// expert) and slots [n * top_k] (for selection (t, k), the assignment index
// it became): the MoE GEMM's inputs and the combine's map.
void moe_group_launch(const int32_t* experts, int64_t n, int64_t top_k, int64_t n_experts, int32_t* offsets,
                      int32_t* x_rows, int32_t* slots, void* stream = nullptr);

// y[t, d] = sum over k (in order) of weights[t, k] * y_assign[slots[t, k], d],
// plus shared[t, d] when shared is not null. y_assign: [n * top_k, hidden].
void moe_combine_launch(const float* y_assign, const int32_t* slots, const float* weights, const float* shared,
                        int64_t n, int64_t top_k, int64_t hidden, float* y, void* stream = nullptr);

// Host round trip for tests: routing of w (bias, tid2eid, scoring, ...) from
// the given logits, then the grouping. Throws nibble::Error naming the token
// when the kernel flagged one.
struct RouteHostResult {
  std::vector<int32_t> experts;  // [n, top_k]
  std::vector<float> weights;    // [n, top_k]
  std::vector<int32_t> offsets, x_rows, slots;
};
RouteHostResult moe_route_run_host(const MoeWeights& w, const std::vector<float>& logits, const int32_t* token_ids,
                                   int64_t n);
// Host round trip of moe_combine_launch.
std::vector<float> moe_combine_run_host(const std::vector<float>& y_assign, const std::vector<int32_t>& slots,
                                        const std::vector<float>& weights, const std::vector<float>& shared,
                                        int64_t n, int64_t top_k, int64_t hidden);

}  // namespace nibble
