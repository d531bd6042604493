#include "convert/quant_metadata.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "util/error.h"

namespace nibble {

using ojson = nlohmann::ordered_json;

namespace {

// Keys a ModelOpt export adds to quantization_config; removed before the new
// ones are written so that no stale value survives a conversion.
const char* const kModelOptKeys[] = {"moe_quant_algo", "quant_algo",      "group_size", "quantized_layers",
                                     "ignore",         "config_groups",   "producer",   "kv_cache_scheme",
                                     "kv_cache_quant_algo"};

// DeepSeek-V4's own stanza for its FP8 block-128 layers (checkpoints.md §1).
ojson stock_fp8_stanza() {
  return {{"activation_scheme", "dynamic"},
          {"fmt", "e4m3"},
          {"quant_method", "fp8"},
          {"scale_fmt", "ue8m0"},
          {"weight_block_size", {128, 128}}};
}

ojson read_ordered(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ojson::object();  // no config.json: start from nothing
  std::stringstream buf;
  buf << in.rdbuf();
  ojson doc = ojson::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) fail(path, ": not a JSON object");
  return doc;
}

// "layers.10.ffn.experts" after "layers.9.ffn.experts"; mtp.* after layers.*.
std::tuple<int, long, std::string> module_key(const std::string& m) {
  const bool mtp = m.rfind("mtp.", 0) == 0;
  const size_t dot = m.find('.');
  long index = std::strtol(m.c_str() + dot + 1, nullptr, 10);
  return {mtp ? 1 : 0, index, m};
}

std::string dump(const ojson& j) { return j.dump(2, ' ', /*ensure_ascii=*/false) + "\n"; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// What gpt-oss's published config.json lists when a source has no list.
const char* const kGptOssNotConverted[] = {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"};

// gpt-oss (docs/convert.md, "gpt-oss"). NVFP4 experts: ModelOpt's NVFP4
// schema as its gpt-oss exports write it (quant_algo NVFP4, exclude_modules;
// no quantized_layers, since every module it does not exclude is NVFP4),
// the exclusions taken from quantization_config.modules_to_not_convert.
// Those are module names ("model.layers.*.self_attn") that transformers
// matches with their submodules; ModelOpt's exclude_modules are fnmatch
// patterns over full names, so each becomes "<module>*". MXFP4 experts:
// the published stanza {modules_to_not_convert, quant_method mxfp4}, the
// list taken back from the exclusions (the trailing "*" dropped), no
// hf_quant_config.json.
ConvertedMetadata gpt_oss_metadata(const std::string& config_path, const ConvertPlan& plan) {
  ConvertedMetadata out;
  const std::string hf_path = (std::filesystem::path(config_path).parent_path() / "hf_quant_config.json").string();
  const bool has_hf = std::filesystem::exists(hf_path);
  if (plan.experts.empty()) {  // every layer already in the target format: the metadata stays as it was
    out.config_json = std::filesystem::exists(config_path) ? read_bytes(config_path) : dump(ojson::object());
    if (has_hf) out.hf_quant_config = read_bytes(hf_path);
    return out;
  }
  ojson cfg = read_ordered(config_path);
  ojson qc = cfg.contains("quantization_config") && cfg["quantization_config"].is_object()
                 ? cfg["quantization_config"]
                 : ojson::object();
  auto strings = [&](const ojson& list, const std::string& where) {
    std::vector<std::string> v;
    if (list.is_null()) return v;
    if (!list.is_array()) fail(where, " must be a list of module names");
    for (const auto& e : list) {
      if (!e.is_string()) fail(where, " must be a list of module names");
      v.push_back(e.get<std::string>());
    }
    return v;
  };
  if (plan.target == Format::nvfp4) {
    std::vector<std::string> keep = strings(qc.value("modules_to_not_convert", ojson()),
                                            config_path + ": quantization_config.modules_to_not_convert");
    if (keep.empty()) keep.assign(std::begin(kGptOssNotConverted), std::end(kGptOssNotConverted));
    for (const auto& m : keep) out.exclude_modules.push_back(m + "*");
    for (const auto& [module, formats] : plan.module_formats) out.quantized_layers.push_back(module);
    std::sort(out.quantized_layers.begin(), out.quantized_layers.end(), [](const std::string& a, const std::string& b) {
      return std::strtol(a.c_str() + a.find_first_of("0123456789"), nullptr, 10) <
             std::strtol(b.c_str() + b.find_first_of("0123456789"), nullptr, 10);
    });
    ojson producer = {{"name", "nibble"}, {"version", kNibbleVersion}};
    ojson hf = {{"producer", producer},
                {"quantization",
                 {{"quant_algo", "NVFP4"},
                  {"kv_cache_quant_algo", nullptr},
                  {"group_size", 16},
                  {"exclude_modules", out.exclude_modules}}}};
    out.hf_quant_config = dump(hf);
    const ojson fp4 = {{"dynamic", false}, {"group_size", 16}, {"num_bits", 4}, {"type", "float"}};
    qc = {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"group_size", 16},
          {"kv_cache_quant_algo", nullptr},
          {"producer", producer},
          {"ignore", out.exclude_modules},  // ModelOpt's config.json name for exclude_modules
          {"config_groups",
           {{"group_0", {{"targets", ojson::array({"Linear"})}, {"weights", fp4}, {"input_activations", fp4}}}}}};
  } else {
    std::vector<std::string> excluded;
    if (has_hf) {
      ojson hf = read_ordered(hf_path);
      const ojson& q = hf.contains("quantization") && hf["quantization"].is_object() ? hf["quantization"] : hf;
      excluded = strings(q.value("exclude_modules", ojson()), hf_path + ": quantization.exclude_modules");
    } else {
      excluded = strings(qc.value("ignore", ojson()), config_path + ": quantization_config.ignore");
    }
    std::vector<std::string> keep;
    for (std::string m : excluded) {
      if (!m.empty() && m.back() == '*') m.pop_back();
      if (!m.empty() && std::find(keep.begin(), keep.end(), m) == keep.end()) keep.push_back(m);
    }
    if (keep.empty()) keep.assign(std::begin(kGptOssNotConverted), std::end(kGptOssNotConverted));
    qc = {{"modules_to_not_convert", keep}, {"quant_method", "mxfp4"}};
  }
  cfg["quantization_config"] = qc;
  out.config_json = dump(cfg);
  return out;
}

}  // namespace

ConvertedMetadata convert_metadata(const std::string& config_path, const ConvertPlan& plan) {
  if (plan.layout == ExpertLayout::gpt_oss) return gpt_oss_metadata(config_path, plan);
  ConvertedMetadata out;
  bool mtp_not_nvfp4 = false, has_mxfp4 = false;
  for (const auto& [module, formats] : plan.module_formats) {
    const bool all_nv = formats.size() == 1 && *formats.begin() == Format::nvfp4;
    if (all_nv) out.quantized_layers.push_back(module);
    if (formats.count(Format::mxfp4)) has_mxfp4 = true;
    if (!all_nv && module.rfind("mtp.", 0) == 0) mtp_not_nvfp4 = true;
  }
  std::sort(out.quantized_layers.begin(), out.quantized_layers.end(),
            [](const std::string& a, const std::string& b) { return module_key(a) < module_key(b); });
  bool mtp_nvfp4 = false;
  for (const auto& m : out.quantized_layers) mtp_nvfp4 |= m.rfind("mtp.", 0) == 0;

  ojson cfg = read_ordered(config_path);
  ojson qc = cfg.contains("quantization_config") && cfg["quantization_config"].is_object()
                 ? cfg["quantization_config"]
                 : ojson::object();
  for (const char* k : kModelOptKeys) qc.erase(k);
  if (qc.value("quant_method", "") == "modelopt") qc = ojson::object();
  if (qc.empty() && plan.has_fp8_block) qc = stock_fp8_stanza();

  if (!out.quantized_layers.empty()) {
    // The modules that stay as they were: DeepSeek-V4's FP8 attention and
    // shared experts, the BF16 head, and the MTP block unless its experts are
    // NVFP4 too (then only its FP8 projections).
    out.exclude_modules = {"*.attn.*", "*.ffn.shared_experts.*", "head"};
    if (mtp_nvfp4 && !mtp_not_nvfp4) {
      out.exclude_modules.push_back("mtp.*.e_proj");
      out.exclude_modules.push_back("mtp.*.h_proj");
    } else {
      out.exclude_modules.push_back("mtp.*");
    }
    ojson layers = ojson::object();
    for (const auto& m : out.quantized_layers) layers[m] = {{"quant_algo", "NVFP4"}, {"group_size", 16}};
    ojson hf = {{"producer", {{"name", "nibble"}, {"version", kNibbleVersion}}},
                {"quantization",
                 {{"quant_algo", "MIXED_PRECISION"},
                  {"kv_cache_quant_algo", nullptr},
                  {"group_size", 16},
                  {"quantized_layers", layers},
                  {"exclude_modules", out.exclude_modules}}}};
    out.hf_quant_config = dump(hf);

    // config.json: the FP8 stanza stays and ModelOpt's fields join it, as in
    // NVIDIA's DeepSeek-V4 NVFP4 exports (compressed-tensors style
    // config_groups targeting "Linear", plus moe_quant_algo, which DeepSeek-V4
    // loaders key on).
    if (qc.empty()) qc["quant_method"] = "modelopt";
    const ojson fp4 = {{"dynamic", false}, {"group_size", 16}, {"num_bits", 4}, {"type", "float"}};
    qc["quant_algo"] = "MIXED_PRECISION";
    qc["moe_quant_algo"] = "NVFP4";
    qc["group_size"] = 16;
    qc["kv_cache_quant_algo"] = nullptr;
    qc["producer"] = hf["producer"];
    qc["quantized_layers"] = layers;
    qc["ignore"] = out.exclude_modules;
    qc["config_groups"] = {
        {"group_0", {{"targets", ojson::array({"Linear"})}, {"weights", fp4}, {"input_activations", fp4}}}};
  }
  if (qc.empty()) cfg.erase("quantization_config");
  else cfg["quantization_config"] = qc;
  // DeepSeek's own marker of MXFP4 experts; an NVFP4 target leaves it as the
  // source had it, as ModelOpt's export does (moe_quant_algo takes precedence).
  if (plan.target == Format::mxfp4 && has_mxfp4) cfg["expert_dtype"] = "fp4";
  out.config_json = dump(cfg);
  return out;
}

}  // namespace nibble
