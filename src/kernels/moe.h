// The fused MoE layer: router, expert selection, clamped SwiGLU experts,
// shared expert, weighted combine. Two flavours share it: DeepSeek-V4's
// (dsv4.md §2.6: separate w1 / w3, silu, selection bias, hash routing) and
// gpt-oss's (one gate_up matrix with gate / up rows interleaved, expert
// biases, a router bias, top-k then softmax over the chosen logits, and
// (up + 1) * gate * sigmoid(alpha * gate)). Implementations
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

// topk_softmax (gpt-oss): the top k of the raw logits, weights = softmax
// over those k logits; the others score every expert before selection.
enum class ScoringFunc { softmax, sigmoid, sqrtsoftplus, topk_softmax };

struct ExpertWeights {
  WeightView w1;  // gate  [inter, hidden]   (empty when w13 is set)
  WeightView w3;  // up    [inter, hidden]   (empty when w13 is set)
  WeightView w2;  // down  [hidden, inter]
  // gpt-oss: gate and up in one matrix [2 * inter, hidden], row 2i the gate
  // and row 2i + 1 the up projection of channel i (as published), with
  // biases b13 [2 * inter] and b2 [hidden] (f32; null: none).
  WeightView w13;
  const float* b13 = nullptr;
  const float* b2 = nullptr;
  bool fused() const { return w13.data != nullptr; }
};

struct MoeWeights {
  int64_t hidden = 0;      // D
  int64_t inter = 0;       // I, expert width
  int64_t n_experts = 0;   // E
  int64_t top_k = 0;       // experts per token
  WeightView gate;         // router [E, D] (BF16 in DeepSeek-V4), logits in f32
  const float* bias = nullptr;        // [E] selection-only bias (noaux_tc), or null
  // Group-limited selection (DeepSeek-V3's noaux_tc): the E experts form
  // n_group groups of E / n_group; a group scores the sum of its top 2
  // (score + bias), the topk_group best groups are kept, and top_k experts
  // are chosen among theirs. n_group <= 1 or topk_group >= n_group: no limit.
  int64_t n_group = 1;
  int64_t topk_group = 1;
  // Hash routing (DeepSeek-V4 layers < num_hash_layers): tid2eid [vocab, top_k]
  // selects the experts from the token id; the router still weights them.
  const void* tid2eid = nullptr;
  bool tid2eid_is_i64 = true;
  int64_t tid2eid_rows = 0;           // vocab
  ScoringFunc scoring = ScoringFunc::sqrtsoftplus;
  bool norm_topk_prob = true;         // renormalise the selected weights to sum 1
  float routed_scaling = 1.0f;        // multiplies the routing weights
  float swiglu_limit = 0.0f;          // > 0: clamp up to [-l, l], gate to <= l
  // > 0 (gpt-oss, 1.702): h = (up + 1) * gate * sigmoid(alpha * gate) after
  // the clamps; 0: h = silu(gate) * up (DeepSeek-V4).
  float swiglu_alpha = 0.0f;
  const float* gate_bias = nullptr;   // [E] added to the router logits (gpt-oss), or null
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
