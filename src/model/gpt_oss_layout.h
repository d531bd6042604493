// What the planner needs to know of a gpt-oss checkpoint's tensors (as
// published: model.layers.N.{self_attn,mlp}.*, model.embed_tokens, lm_head):
// which group each belongs to and how decoding one token reads it. The
// stacked MXFP4 experts (mlp.experts.{gate_up,down}_proj_blocks) and their
// biases are read top-k of num_local_experts per token; the embedding one row.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"

namespace nibble {

// The group of one gpt-oss tensor (detection's name: weights without ".weight").
TensorGroup gpt_oss_tensor_group(const std::string& name, Format format);

// Throws nibble::Error where config.json contradicts the tensors (hidden
// size, vocabulary, layers, experts).
ModelLayout gpt_oss_layout(const Checkpoint& ck, const Detection& det);

}  // namespace nibble
