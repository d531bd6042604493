// The plan: every tensor group of a checkpoint with its format, where that
// came from, the kernel chosen for it on a device and every rejected
// alternative, and the weight bytes decoding one token reads. It is the
// single answer to "which format, which kernel, and why"; `nibble explain`
// prints it and the model binds its kernels from it.
//
// The planner knows formats, ops and kernels, not tensor names or config
// fields: the model's architecture says which group each tensor belongs to
// and how decoding uses it (a ModelLayout, model/registry.h), and the
// planner turns that into kernels and bytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/detect.h"
#include "device/device.h"
#include "kernels/registry.h"

namespace nibble {

// How decoding one token reads a group's tensors.
enum class DecodeRead {
  all,           // every byte (dense linears, norms, hyper-connections)
  top_k_experts, // experts_per_token of routed_experts experts (the MoE op)
  one_row,       // one row of each tensor (embedding, hash-routing table); no matrix op
  none,          // nothing: loaded and validated, not run (an MTP layer)
};

// What the architecture says about one tensor.
struct TensorGroup {
  std::string name;                    // "routed_experts", "attention", ...
  DecodeRead read = DecodeRead::all;
  bool routed = false;                 // experts of a MoE layer: run by the moe op
  bool counted_apart = false;          // in Plan::mtp_params, not Plan::params
  std::string note;                    // how the model uses the group, where it has no kernel to say so
};

// What the model's architecture tells the planner about a checkpoint. The
// tensors of one (group, format) must agree on read, routed and note.
struct ModelLayout {
  std::string architecture;            // "DeepseekV4ForCausalLM"
  int64_t layers = 0;
  int64_t routed_experts = 0;          // experts per MoE layer (0: none)
  int64_t experts_per_token = 0;       // top-k
  std::vector<TensorGroup> tensors;    // one per Detection::tensors entry, same order
  // Index words of the tensor names, with the letter that stands for any
  // index in folded provenance and warnings: {"layers.", "N"} turns
  // "layers.12.ffn" into "layers.N.ffn", so one line stands for every layer.
  std::vector<std::pair<std::string, std::string>> index_words;
  // The model's forward has every op on the CUDA backend (DeepSeek-V4), so
  // a CUDA plan has a backend ("cuda"); the other models run on CPUs only.
  bool runs_on_cuda = false;
};

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
  // In the device's memory: for a CUDA device the layouts its kernels read
  // (repacked, padded; kernels/cuda/weight_store.h), else `bytes`.
  uint64_t device_bytes = 0;
};

struct Plan {
  std::string architecture;     // ModelLayout::architecture
  uint64_t params = 0;          // logical elements of the main model, scales excluded
  uint64_t mtp_params = 0;      // of the multi-token-prediction layer(s), counted apart
  int64_t layers = 0;           // ModelLayout::layers
  Device device;
  // The backend that runs every op of the forward on `device` (model/backend.h):
  // "cpu" for CPU devices, "cuda" for CUDA devices where the model's forward
  // runs there (ModelLayout::runs_on_cuda); "" where nibble has none yet.
  std::string backend;
  std::vector<GroupPlan> groups;
  uint64_t bytes_per_token = 0;
  uint64_t device_bytes = 0;      // sum of the groups' device_bytes
  double bound_tokens_per_s = 0;  // bandwidth / bytes_per_token
  std::string metadata_schema;
  std::vector<std::string> warnings;
};

// Throws nibble::Error naming `path` when detection found a quantization
// method nibble cannot run (checked before anything reads the architecture,
// so that such a checkpoint is named for its method).
void check_methods_supported(const std::string& path, const Detection& det);

// Throws nibble::Error for an unsupported method (check_methods_supported),
// a layout that does not match the detection, or a forced backend that
// cannot run its op.
Plan make_plan(const std::string& path, const Detection& det, const ModelLayout& layout, const Device& device,
               const PlanOptions& options);

}  // namespace nibble
