// The plan: every tensor group of a checkpoint with its format, where that
// came from, the kernel chosen for it on a device and every rejected
// alternative, and the weight bytes decoding one token reads. It is the
// single answer to "which format, which kernel, and why"; `nibble explain`
// prints it and the model binds its kernels from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "device/device.h"
#include "kernels/registry.h"

namespace nibble {

struct PlanOptions {
  std::string moe_backend = "auto";     // --moe-backend NAME|auto
  std::string linear_backend = "auto";  // --linear-backend NAME|auto
  int64_t batch = 1;                    // tokens per decode step
};

struct GroupPlan {
  std::string group;        // "routed_experts", "attention", ...
  Format format = Format::f32;
  int64_t tensors = 0;      // logical tensors (a weight with its scales is one)
  uint64_t bytes = 0;       // stored bytes, scales included
  uint64_t params = 0;      // logical elements
  std::string provenance;   // where the format decision came from
  bool has_op = false;      // a matrix op the planner chose a kernel for
  Op op = Op::linear;
  Selection selection;      // valid when has_op
  std::string note;         // for groups without a kernel: how they are used
  uint64_t bytes_per_token = 0;  // of `bytes`, what one decoded token reads
};

struct Plan {
  std::string architecture;     // config.json architectures[0]
  uint64_t params = 0;          // logical elements of the main model, scales excluded
  uint64_t mtp_params = 0;      // of the multi-token-prediction layer(s), counted apart
  int64_t layers = 0;           // num_hidden_layers
  Device device;
  // The backend that runs every op of the forward on `device` (model/backend.h):
  // "cpu" for CPU devices; "" where nibble has none yet (CUDA devices).
  std::string backend;
  std::vector<GroupPlan> groups;
  uint64_t bytes_per_token = 0;
  double bound_tokens_per_s = 0;  // bandwidth / bytes_per_token
  std::string metadata_schema;
  std::vector<std::string> warnings;
};

// The group a tensor belongs to, from its name (DeepSeek official and HF
// naming): "routed_experts", "mtp_routed_experts", "attention", ...
std::string tensor_group(const std::string& name);

// Throws nibble::Error when the checkpoint uses a method nibble cannot run,
// when config.json contradicts the tensors, or when a forced backend cannot
// run its op.
Plan make_plan(const Checkpoint& ck, const Detection& det, const Device& device,
               const PlanOptions& options);

}  // namespace nibble
