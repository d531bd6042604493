// What `nibble convert` will write, decided before a byte is written: which
// routed-expert matrices change format (and with which scales), which
// tensors are copied byte for byte, and the exact tensor list of every output
// shard in file order.
//
// Making the plan reads only what the scales need: for an MXFP4 source the
// UE8M0 scales of every expert (k_max of each w1/w3 pair), for a BF16 source
// the amax of every expert (a full read of the experts, because ModelOpt's
// weight_scale_2 is amax / 2688 over the pair), for an NVFP4 source its
// weight_scale_2 scalars. The output shards then stream one tensor at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/cancel.h"
#include "convert/expert_convert.h"

namespace nibble {

// What happens to the MTP block's routed experts (mtp.N.ffn.experts.*).
enum class MtpExperts {
  auto_,    // keep FP4 experts as they are (NVIDIA's NVFP4 release keeps them MXFP4), quantize BF16 ones
  keep,     // never touch them
  convert,  // convert them like the main layers' experts
};

// One routed-expert matrix that changes format.
struct ExpertItem {
  std::string base;    // "layers.3.ffn.experts.7.w1" (stored names add .weight, .scale, ...)
  std::string module;  // "layers.3.ffn.experts": the unit hf_quant_config.json lists
  std::string proj;    // "w1", "w2" or "w3"
  bool mtp = false;
  ExpertSource source;         // zero-copy view of the source tensors
  ExpertOp op = ExpertOp::mxfp4_to_nvfp4;
  ExpertTargetParams params;   // k_max or s_g, shared by a w1/w3 pair
  bool all_in_window = false;  // MXFP4 -> NVFP4 with every block within 17 binades of k_max:
                               // the packed bytes are the source's, only the scales change
  float input_scale = 0;       // NVFP4 target: the .input_scale written (see docs/convert.md)
  // gpt-oss, MXFP4 target: the stacked tensor this expert is one slice of
  // ("model.layers.0.mlp.experts.gate_up_proj", stored as _blocks / _scales);
  // empty: the expert has tensors of its own (`base`.weight, ...).
  std::string stacked;
};

struct OutputTensor {
  enum class Kind {
    copy,           // bytes of `src`, unchanged
    expert_weight,  // packed FP4 of experts[expert, expert + expert_count), one after the other
    expert_scale,   // their block scales, likewise; always right after the weight
    scalar,         // one F32 `value` (weight_scale_2, input_scale)
  };
  TensorSpec spec;
  Kind kind = Kind::copy;
  const TensorInfo* src = nullptr;  // copy
  int expert = -1;                  // expert_weight / expert_scale: the first expert
  int expert_count = 1;             // > 1: gpt-oss's stacked *_blocks / *_scales, E experts in a row
  float value = 0;                  // scalar
};

struct ShardPlan {
  std::string file;                          // output file name, as the source shard's
  std::vector<OutputTensor> tensors;         // in file order
  std::map<std::string, std::string> metadata;  // the source shard's __metadata__
  uint64_t data_bytes = 0;                   // sum of tensor bytes
};

// Which checkpoint layout the plan rewrites.
enum class ExpertLayout {
  dsv4,     // layers.N.ffn.experts.M.w1/w2/w3 (DeepSeek-V4)
  gpt_oss,  // model.layers.N.mlp.experts.{gate_up,down}_proj: stacked MXFP4 or per-expert NVFP4 (gpt_oss_plan.h)
};

struct ConvertPlan {
  Format target = Format::nvfp4;
  ExpertLayout layout = ExpertLayout::dsv4;
  std::vector<ExpertItem> experts;  // the matrices that change format
  std::vector<ShardPlan> shards;
  int64_t experts_kept = 0;         // routed-expert matrices copied unchanged
  int64_t mtp_experts_kept = 0;     // of which in the MTP block
  std::map<std::string, std::set<Format>> module_formats;  // experts module -> formats in the output
  bool has_fp8_block = false;       // FP8 block-128 tensors remain (DeepSeek's dense layers)
  uint64_t source_bytes = 0;        // tensor bytes of the source
  std::vector<std::string> warnings;
};

// A converted expert matrix as a layout's planner finds it.
struct PlannedExpert {
  ExpertItem item;
  std::string file;    // output shard: the source shard holding its weight
  uint64_t order = 0;  // source offset of its weight bytes (the output follows the source)
};

// What a layout's planner found: the matrices that change format, the
// stored tensors they replace, and what stays.
struct PlannedExperts {
  std::vector<PlannedExpert> experts;        // stacked ones (ExpertItem::stacked) consecutive, in order
  std::set<std::string> consumed;            // stored tensors replaced by the converted ones
  int64_t kept = 0, mtp_kept = 0;            // expert matrices copied unchanged
  std::map<std::string, std::set<Format>> module_formats;
  std::vector<std::string> warnings;
};

struct PlanProgress {
  std::function<void(uint64_t done, uint64_t total)> on_scan;  // bytes of the scale scan
  const std::atomic<int>* cancel = nullptr;                    // non-zero: stop (the signal number)
};

// Largest |x| of the BF16 / F32 vector `name` (a norm's gamma, for the
// input_scale bound); nullopt when it is missing or of another dtype, an
// error naming it for a NaN or infinite element.
std::optional<float> vector_amax(const Checkpoint& ck, const std::string& name);

// Throws nibble::Error naming the tensor for anything that cannot be
// converted (an FP8 expert, a column count that is not a multiple of 32, a
// NaN scale found by the scan).
ConvertPlan make_convert_plan(const Checkpoint& ck, const Detection& det, Format target, MtpExperts mtp,
                              const PlanProgress& progress = {});

}  // namespace nibble
