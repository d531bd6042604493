#include "runtime/plan_checkpoint.h"

#include "model/registry.h"

namespace nibble {

Plan plan_checkpoint(const Checkpoint& ck, const Detection& det, const Device& device, const PlanOptions& options) {
  return plan_model(ck, det, device, options);
}

}  // namespace nibble
