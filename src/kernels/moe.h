// The fused DeepSeek-V4 MoE layer (dsv4.md §2.6): router, expert selection,
// clamped SwiGLU experts, shared expert, weighted combine. Implementations
// (reference, AVX2, AVX-512) share this signature and are chosen by the
// planner; for a batch, tokens are grouped by expert so that each selected
// expert's weights are read once.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/linear.h"
#include "kernels/weights.h"

namespace nibble {

class ThreadPool;

enum class ScoringFunc { softmax, sigmoid, sqrtsoftplus };

struct ExpertWeights {
  WeightView w1;  // gate  [inter, hidden]
  WeightView w3;  // up    [inter, hidden]
  WeightView w2;  // down  [hidden, inter]
};

struct MoeWeights {
  int64_t hidden = 0;      // D
  int64_t inter = 0;       // I, expert width
  int64_t n_experts = 0;   // E
  int64_t top_k = 0;       // experts per token
  WeightView gate;         // router [E, D] (BF16 in DeepSeek-V4), logits in f32
  const float* bias = nullptr;        // [E] selection-only bias (noaux_tc), or null
  // Hash routing (DeepSeek-V4 layers < num_hash_layers): tid2eid [vocab, top_k]
  // selects the experts from the token id; the router still weights them.
  const void* tid2eid = nullptr;
  bool tid2eid_is_i64 = true;
  int64_t tid2eid_rows = 0;           // vocab
  ScoringFunc scoring = ScoringFunc::sqrtsoftplus;
  bool norm_topk_prob = true;         // renormalise the selected weights to sum 1
  float routed_scaling = 1.0f;        // multiplies the routing weights
  float swiglu_limit = 0.0f;          // > 0: clamp up to [-l, l], gate to <= l
  std::vector<ExpertWeights> experts; // [E]
  bool has_shared = false;
  ExpertWeights shared;               // width `inter` (n_shared_experts = 1)
};

// x: [n, D]; token_ids: [n] (needed for hash routing; may be null otherwise);
// y: [n, D] (overwritten). Throws nibble::Error for a token id outside tid2eid.
using MoeFn = void (*)(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n,
                       float* y, ThreadPool* pool);

// The scalar reference, built on linear_ref; the oracle for the fused kernels.
void moe_ref(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
             ThreadPool* pool);

}  // namespace nibble
