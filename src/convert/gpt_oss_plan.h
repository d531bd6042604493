// gpt-oss's routed experts for `nibble convert` (docs/convert.md, "gpt-oss").
//
// As published, each layer's experts are two stacked MXFP4 tensors,
// model.layers.N.mlp.experts.{gate_up,down}_proj_{blocks,scales}, E experts'
// [rows, cols] matrices back to back. There is no NVIDIA-published NVFP4
// gpt-oss; the community's ModelOpt exports store experts one by one, so the
// NVFP4 side is per expert: model.layers.N.mlp.experts.M.gate_up_proj.weight
// U8 [2I, D/2] (rows in gpt-oss's interleaved gate/up order, so gate and up
// share one weight_scale_2), .weight_scale F8_E4M3 [2I, D/16],
// .weight_scale_2 and .input_scale F32 [], and .M.down_proj.* likewise.
//   stacked MXFP4  --to nvfp4  one ExpertItem per expert and projection, its
//                              source a zero-copy row slice of the stacked
//                              tensor; the lossless cast with k_max over that
//                              expert's matrix
//   per-expert NVFP4 --to mxfp4  the E experts of a projection written in a
//                              row as the stacked _blocks / _scales again
//                              (ExpertItem::stacked), blocks the cast wrote
//                              restored byte for byte
// The format a layer already has is copied. Biases, router, attention,
// sinks, norms and embeddings are copied byte for byte.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "convert/convert_plan.h"

namespace nibble {

// config.json names GptOssForCausalLM (architectures[0]) or model_type gpt_oss.
bool is_gpt_oss(const Checkpoint& ck);

// Throws nibble::Error naming the tensor for a layer with both layouts, a
// per-expert set with an expert or projection missing, a stacked tensor whose
// expert count contradicts config.json, experts in a format convert does not
// rewrite here, or a NaN scale code (found by the scan).
PlannedExperts plan_gpt_oss_experts(const Checkpoint& ck, const Detection& det, Format target,
                                    const PlanProgress& progress);

}  // namespace nibble
