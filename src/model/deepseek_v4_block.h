// One DeepSeek-V4 decoder block (dsv4.md §2.2): two sublayers, each wrapped
// in a hyper-connection over the N residual streams:
//   x, post, comb = hc_pre(X, hc_attn);  X = hc_post(attn(attn_norm(x)), X, post, comb)
//   x, post, comb = hc_pre(X, hc_ffn);   X = hc_post(moe(ffn_norm(x), ids), X, post, comb)
// The MoE sublayer (router, hash or score routing, clamped SwiGLU experts,
// shared expert) is the fused kernel of kernels/moe.h that the plan chose.
// A step's tokens of every sequence go through it together: everything but
// attention's per-sequence part runs once over all of them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe.h"
#include "model/deepseek_v4_attention.h"
#include "model/deepseek_v4_hc.h"

namespace nibble {

// Move-only: `moe` holds pointers into gate_bias / tid2eid, which a move
// keeps valid (the vectors' buffers move with them) and a copy would not.
struct BlockWeights {
  BlockWeights() = default;
  BlockWeights(const BlockWeights&) = delete;
  BlockWeights& operator=(const BlockWeights&) = delete;
  BlockWeights(BlockWeights&&) noexcept = default;
  BlockWeights& operator=(BlockWeights&&) noexcept = default;

  std::vector<float> attn_norm, ffn_norm;  // [D]
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;                          // views + pointers into the vectors below
  MoeFn moe_fn = nullptr;
  BoundLinear router;                      // moe.gate with its linear kernel (step statistics only)
  std::vector<float> gate_bias;            // [E] aligned copy (score-routed layers)
  std::vector<int64_t> tid2eid;            // [vocab, top_k] aligned copy (hash layers)
};

class Backend;
struct Tensor;

// streams [T, N*D] of a step's tokens (ids [T] at positions [T]; `seqs`
// partitions them by sequence, with this layer's state of each) updated in
// place, as a sequence of backend ops. distinct_experts (may be null):
// receives how many routed experts the step's tokens selected, for
// benchmarks (routes the tokens once more).
void block_forward(Backend& be, const BlockWeights& w, const HcShape& hc, const AttentionShape& as,
                   const RopeTable& rope, const RopeTable& compress_rope, std::span<const int32_t> ids,
                   std::span<const int64_t> positions, std::span<const AttnSeq> seqs, Tensor streams,
                   int64_t* distinct_experts = nullptr);

}  // namespace nibble
