// The planning half of loading, for `nibble explain`: the plan the model
// registry makes for a checkpoint (its architecture's layout, or the
// DeepSeek / HF grouping for an architecture nibble does not run), without
// binding anything. Here so that cli/ plans without including model/.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "device/device.h"
#include "kernels/plan.h"

namespace nibble {

Plan plan_checkpoint(const Checkpoint& ck, const Detection& det, const Device& device, const PlanOptions& options);

}  // namespace nibble
