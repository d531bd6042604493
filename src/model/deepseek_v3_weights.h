// DeepSeek-V3's weights bound to the kernels the plan chose: zero-copy views
// into the checkpoint's memory map for every matrix (BF16, FP8 block-128
// with F32 weight_scale_inv, or compressed-tensors INT4 for Kimi K2's routed
// experts), f32 copies of the small vectors (norms, the routing bias), and
// kv_b_proj once more as f32 for the absorbed attention
// (deepseek_v3_attention.h: its rows are read per head, transposed for
// q_nope, which no linear kernel does). Errors name the tensor and the
// config field its expected shape comes from.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/moe.h"
#include "kernels/plan.h"
#include "model/deepseek_v3_config.h"
#include "model/model.h"
#include "model/ops.h"

namespace nibble {

// A SwiGLU MLP: the dense layers' and the shared experts'.
struct Dsv3Mlp {
  BoundLinear gate, up, down;  // [W, D], [W, D], [D, W]
  int64_t width() const { return gate.rows(); }
};

struct Dsv3Attention {
  BoundLinear q;                 // q_proj [H*(n+r), D] (q_lora_rank null), else empty
  BoundLinear q_a, q_b;          // q_a_proj [q_lora, D], q_b_proj [H*(n+r), q_lora]
  std::vector<float> q_a_norm;   // [q_lora]
  BoundLinear kv_a;              // kv_a_proj_with_mqa [C + r, D]
  std::vector<float> kv_a_norm;  // [C]
  std::vector<float> kv_b;       // kv_b_proj as f32 [H*(n+v), C]
  BoundLinear o;                 // o_proj [D, H*v]
};

// Move-only: `moe` points into router_bias (a moved vector keeps its buffer).
struct Dsv3LayerWeights {
  Dsv3LayerWeights() = default;
  Dsv3LayerWeights(const Dsv3LayerWeights&) = delete;
  Dsv3LayerWeights& operator=(const Dsv3LayerWeights&) = delete;
  Dsv3LayerWeights(Dsv3LayerWeights&&) noexcept = default;
  Dsv3LayerWeights& operator=(Dsv3LayerWeights&&) noexcept = default;

  std::vector<float> attn_norm, ffn_norm;  // [D] input_layernorm, post_attention_layernorm
  Dsv3Attention attn;
  bool dense = false;                      // layer < first_k_dense_replace
  Dsv3Mlp mlp;                             // dense layers: width intermediate_size
  BoundLinear router;                      // mlp.gate [E, D] (also moe.gate)
  std::vector<float> router_bias;          // [E] e_score_correction_bias
  MoeWeights moe;                          // routed experts (gate_proj, up_proj, down_proj views)
  MoeFn moe_fn = nullptr;
  bool has_shared = false;
  Dsv3Mlp shared;                          // width n_shared_experts * moe_intermediate_size
};

// The multi-token-prediction layer (model.layers.{num_hidden_layers}), the
// draft of speculative decoding (deepseek_v3_mtp.cpp). DeepSeek-V3 publishes
// the layer with its own copies of the embedding and the output head
// (README_WEIGHTS.md: "shares parameters with" the main model's); they are
// read as stored, and the main model's are used where a checkpoint leaves
// them out.
struct Dsv3MtpWeights {
  std::vector<float> enorm, hnorm;         // [D]
  BoundLinear eh_proj;                     // [D, 2D]: columns [0, D) the embedding's, [D, 2D) the hidden's
  Dsv3LayerWeights layer;
  std::vector<float> head_norm;            // shared_head.norm [D]
  BoundLinear head;                        // shared_head.head [V, D], else lm_head
  WeightView embed;                        // embed_tokens [V, D], else model.embed_tokens
};

struct Dsv3Weights {
  WeightView embed;                        // [V, D]
  std::vector<Dsv3LayerWeights> layers;
  std::vector<float> norm;                 // [D]
  BoundLinear head;                        // [V, D]
  std::vector<Dsv3MtpWeights> mtp;         // [num_nextn_predict_layers]
};

Dsv3Weights bind_deepseek_v3_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                     const DeepseekV3Config& cfg, const LoadOptions& options);

}  // namespace nibble
