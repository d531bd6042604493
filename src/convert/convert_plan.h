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
};

struct OutputTensor {
  enum class Kind {
    copy,           // bytes of `src`, unchanged
    expert_weight,  // packed FP4 of experts[expert]
    expert_scale,   // block scales of experts[expert]; always right after its weight
    scalar,         // one F32 `value` (weight_scale_2, input_scale)
  };
  TensorSpec spec;
  Kind kind = Kind::copy;
  const TensorInfo* src = nullptr;  // copy
  int expert = -1;                  // expert_weight / expert_scale
  float value = 0;                  // scalar
};

struct ShardPlan {
  std::string file;                          // output file name, as the source shard's
  std::vector<OutputTensor> tensors;         // in file order
  std::map<std::string, std::string> metadata;  // the source shard's __metadata__
  uint64_t data_bytes = 0;                   // sum of tensor bytes
};

struct ConvertPlan {
  Format target = Format::nvfp4;
  std::vector<ExpertItem> experts;  // the matrices that change format
  std::vector<ShardPlan> shards;
  int64_t experts_kept = 0;         // routed-expert matrices copied unchanged
  int64_t mtp_experts_kept = 0;     // of which in the MTP block
  std::map<std::string, std::set<Format>> module_formats;  // experts module -> formats in the output
  bool has_fp8_block = false;       // FP8 block-128 tensors remain (DeepSeek's dense layers)
  uint64_t source_bytes = 0;        // tensor bytes of the source
  std::vector<std::string> warnings;
};

struct PlanProgress {
  std::function<void(uint64_t done, uint64_t total)> on_scan;  // bytes of the scale scan
  const std::atomic<int>* cancel = nullptr;                    // non-zero: stop (the signal number)
};

// Throws nibble::Error naming the tensor for anything that cannot be
// converted (an FP8 expert, a column count that is not a multiple of 32, a
// NaN scale found by the scan).
ConvertPlan make_convert_plan(const Checkpoint& ck, const Detection& det, Format target, MtpExperts mtp,
                              const PlanProgress& progress = {});

}  // namespace nibble
