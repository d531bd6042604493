// Load/bind step of DeepSeek-V4: finds every tensor the forward pass needs by
// its official name (dsv4.md §3), checks its shape against config.json, and
// binds it zero-copy to the kernel the plan chose for its group. Only small
// vectors (norm weights, biases, hc base/scale, sinks, ape, tid2eid) are
// copied, into aligned f32/i64 arrays. MTP layers are bound and validated
// the same way but not run. Every problem is a nibble::Error naming the
// tensor and the config field it contradicts.
#pragma once

#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"
#include "model/deepseek_v4_block.h"
#include "model/deepseek_v4_config.h"
#include "model/model.h"

namespace nibble {

// One multi-token-prediction layer (mtp.K.*): validated, not run.
struct MtpWeights {
  BlockWeights block;
  BoundLinear e_proj, h_proj;              // [D, D]
  std::vector<float> enorm, hnorm, norm;   // [D]
  HcHeadWeights hc_head;
};

struct DeepseekV4Weights {
  WeightView embed;                        // [V, D], rows looked up per token
  BoundLinear head;                        // [V, D]
  std::vector<float> norm;                 // [D]
  HcHeadWeights hc_head;
  std::vector<BlockWeights> layers;        // [n_layers]
  std::vector<MtpWeights> mtp;             // [num_nextn_predict_layers]
};

DeepseekV4Weights bind_deepseek_v4_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                           const DeepseekV4Config& cfg, const LoadOptions& options);

}  // namespace nibble
