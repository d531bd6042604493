// Load/bind step of DeepSeek-V4: finds every tensor the forward pass needs by
// its official name (dsv4.md §3), checks its shape against config.json, and
// binds it zero-copy to the kernel the plan chose for its group. Only small
// vectors (norm weights, biases, hc base/scale, sinks, ape, tid2eid) are
// copied, into aligned f32/i64 arrays. Every problem is a nibble::Error
// naming the tensor and the config field it contradicts, except in the MTP
// layers (the speculative-decoding draft): a missing, partial or misshapen
// mtp.* set leaves the model loadable without them, and the reason is kept
// for `explain` and for the error when speculation is asked for.
#pragma once

#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/plan.h"
#include "model/deepseek_v4_block.h"
#include "model/deepseek_v4_config.h"
#include "model/model.h"

namespace nibble {

// One multi-token-prediction layer (mtp.K.*, dsv4.md §2.7): the draft of
// speculative decoding (deepseek_v4_mtp.cpp runs it).
struct MtpWeights {
  BlockWeights block;                      // sliding-window, score-routed
  BoundLinear e_proj, h_proj;              // [D, D]
  std::vector<float> enorm, hnorm, norm;   // [D]
  HcHeadWeights hc_head;                   // the layer's own final collapse
};

struct DeepseekV4Weights {
  WeightView embed;                        // [V, D], rows looked up per token
  BoundLinear head;                        // [V, D]
  std::vector<float> norm;                 // [D]
  HcHeadWeights hc_head;
  std::vector<BlockWeights> layers;        // [n_layers]
  std::vector<MtpWeights> mtp;             // the MTP layers that bound (all or none)
  std::string mtp_missing;                 // why `mtp` is empty (a message naming the tensor or field)
};

DeepseekV4Weights bind_deepseek_v4_weights(const Checkpoint& ck, const Detection& det, const Plan& plan,
                                           const DeepseekV4Config& cfg, const LoadOptions& options);

}  // namespace nibble
