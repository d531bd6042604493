// The metadata files of a converted checkpoint: config.json's
// quantization_config (and DeepSeek's expert_dtype) and ModelOpt's
// hf_quant_config.json, in the schemas other engines read (checkpoints.md §1
// and §2). Everything else in config.json is kept as it was, key order
// included.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "convert/convert_plan.h"

namespace nibble {

// The version nibble writes as the producer of hf_quant_config.json (as
// `nibble version` prints it).
constexpr const char* kNibbleVersion = "0.1.0";

struct ConvertedMetadata {
  std::string config_json;                      // the new config.json
  std::optional<std::string> hf_quant_config;   // written when NVFP4 experts remain, else none
  std::vector<std::string> quantized_layers;    // modules listed as NVFP4
  std::vector<std::string> exclude_modules;
};

// `config_path` is SRC's config.json. NVFP4 experts in the output get
// ModelOpt's current schema: hf_quant_config.json {producer, quantization
// {quant_algo MIXED_PRECISION, kv_cache_quant_algo null, group_size 16,
// quantized_layers, exclude_modules}}, and in config.json the FP8 stanza is
// kept and moe_quant_algo, quant_algo, group_size, quantized_layers, ignore
// and config_groups are added. MXFP4 experts get DeepSeek's convention,
// expert_dtype "fp4" outside quantization_config.
ConvertedMetadata convert_metadata(const std::string& config_path, const ConvertPlan& plan);

}  // namespace nibble
