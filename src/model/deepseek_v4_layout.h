// What DeepSeek-V4 tells the planner about a checkpoint (kernels/plan.h's
// ModelLayout): the group of every tensor, from its name (the official
// naming and Hugging Face's), how decoding one token reads it, and the
// layer and expert counts of config.json once they are checked against
// the tensors.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"

namespace nibble {

// The group of tensor `name` stored in `format`: "routed_experts",
// "mtp_routed_experts", "attention", ... The model binds each tensor to its
// group's kernel in the plan by this name.
TensorGroup deepseek_v4_tensor_group(const std::string& name, Format format);

// Throws nibble::Error naming config.json when a field it reads
// (hidden_size, vocab_size, num_hidden_layers, n_routed_experts,
// moe_intermediate_size, num_experts_per_tok) contradicts the tensors or is
// missing where the tensors need it. Fields absent from config.json are not
// checked here (the loader requires the dimensions it runs with).
ModelLayout deepseek_v4_layout(const Checkpoint& ck, const Detection& det);

}  // namespace nibble
