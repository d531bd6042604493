// What the planner needs to know of a DeepSeek-V3 checkpoint's tensors (as
// DeepSeek and Moonshot publish them: model.layers.N.{self_attn,mlp}.*,
// per-expert mlp.experts.E.{gate,up,down}_proj, model.embed_tokens, lm_head):
// which group each belongs to and how decoding one token reads it. Layers
// num_hidden_layers .. + num_nextn_predict_layers - 1 are the MTP layer(s):
// counted apart and not read by decode.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"

namespace nibble {

// The group of one DeepSeek-V3 tensor (detection's name: weights without
// ".weight"); `n_layers` is num_hidden_layers (a larger layer index is MTP).
TensorGroup deepseek_v3_tensor_group(const std::string& name, int64_t n_layers);

// Throws nibble::Error where config.json contradicts the tensors (hidden
// size, vocabulary, layers, experts, expert width).
ModelLayout deepseek_v3_layout(const Checkpoint& ck, const Detection& det);

}  // namespace nibble
