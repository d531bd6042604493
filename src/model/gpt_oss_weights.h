// gpt-oss's weights bound to the kernels the plan chose: zero-copy views
// into the checkpoint's memory map for every matrix (BF16 attention, router,
// embedding and head; MXFP4 experts read as published, one view per expert
// into the stacked *_blocks / *_scales), f32 copies of the small vectors
// (norms, biases, sinks). Errors name the tensor and the config field its
// expected shape comes from.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/moe.h"
#include "kernels/plan.h"
#include "model/gpt_oss_config.h"
#include "model/model.h"
#include "model/ops.h"

namespace nibble {

// Move-only: `moe` points into the vectors below (a moved vector keeps its buffer).
struct GptOssLayerWeights {
  GptOssLayerWeights() = default;
  GptOssLayerWeights(const GptOssLayerWeights&) = delete;
  GptOssLayerWeights& operator=(const GptOssLayerWeights&) = delete;
  GptOssLayerWeights(GptOssLayerWeights&&) noexcept = default;
  GptOssLayerWeights& operator=(GptOssLayerWeights&&) noexcept = default;

  std::vector<float> attn_norm, ffn_norm;    // [D] input_layernorm, post_attention_layernorm
  BoundLinear q, k, v, o;                    // [H*d, D], [KV*d, D], [KV*d, D], [D, H*d]
  std::vector<float> q_bias, k_bias, v_bias, o_bias;  // [H*d], [KV*d], [KV*d], [D] (empty: no bias)
  std::vector<float> sinks;                  // [H]
  BoundLinear router;                        // [E, D] (also moe.gate)
  std::vector<float> router_bias;            // [E]
  std::vector<float> gate_up_bias;           // [E, 2I]
  std::vector<float> down_bias;              // [E, D]
  MoeWeights moe;                            // experts: w13 [2I, D] + w2 [D, I] views per expert
  MoeFn moe_fn = nullptr;
  bool sliding = false;                      // layer_types[l] == "sliding_attention"
};

struct GptOssWeights {
  WeightView embed;                          // [V, D]
  std::vector<GptOssLayerWeights> layers;
  std::vector<float> norm;                   // [D]
  BoundLinear head;                          // [V, D]
};

GptOssWeights bind_gpt_oss_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                   const GptOssConfig& cfg, const LoadOptions& options);

}  // namespace nibble
