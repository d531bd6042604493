// One DeepSeek-V4 decoder block (dsv4.md §2.2): two sublayers, each wrapped
// in a hyper-connection over the N residual streams:
//   x, post, comb = hc_pre(X, hc_attn);  X = hc_post(attn(attn_norm(x)), X, post, comb)
//   x, post, comb = hc_pre(X, hc_ffn);   X = hc_post(moe(ffn_norm(x), ids), X, post, comb)
// The MoE sublayer (router, hash or score routing, clamped SwiGLU experts,
// shared expert) is the fused kernel of kernels/moe.h that the plan chose.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe.h"
#include "model/deepseek_v4_attention.h"
#include "model/deepseek_v4_hc.h"

namespace nibble {

struct BlockWeights {
  std::vector<float> attn_norm, ffn_norm;  // [D]
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;                          // views + pointers into the vectors below
  MoeFn moe_fn = nullptr;
  std::vector<float> gate_bias;            // [E] aligned copy (score-routed layers)
  std::vector<int64_t> tid2eid;            // [vocab, top_k] aligned copy (hash layers)
};

// streams [n, N, D] of tokens p0 .. p0+n-1 (ids [n]) updated in place.
void block_forward(const BlockWeights& w, const HcShape& hc, const AttentionShape& as, const RopeTable& rope,
                   const RopeTable& compress_rope, const int32_t* ids, int64_t n, int64_t p0, AttentionState& st,
                   float* streams, ThreadPool* pool);

}  // namespace nibble
