#include "model/registry.h"

#include <nlohmann/json.hpp>

#include "device/device.h"
#include "model/deepseek_v3.h"
#include "model/deepseek_v3_layout.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v4_layout.h"
#include "model/gpt_oss.h"
#include "model/gpt_oss_layout.h"
#include "util/error.h"

namespace nibble {

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> registry = {
      {"DeepseekV4ForCausalLM", deepseek_v4_layout, load_deepseek_v4},
      {"GptOssForCausalLM", gpt_oss_layout, load_gpt_oss},
      {"DeepseekV3ForCausalLM", deepseek_v3_layout, load_deepseek_v3},
  };
  return registry;
}

const ModelEntry& model_entry(const Checkpoint& ck) {
  const std::string cfg_path = ck.file_path("config.json");
  const nlohmann::json& cfg = ck.config();
  auto arch_it = cfg.find("architectures");
  if (arch_it == cfg.end() || !arch_it->is_array() || arch_it->empty() || !(*arch_it)[0].is_string())
    fail(cfg_path, ": field \"architectures\" is missing or not a list of names");
  const std::string arch = (*arch_it)[0].get<std::string>();
  const ModelEntry* entry = nullptr;
  for (const auto& e : model_registry())
    if (arch == e.architecture) entry = &e;
  if (!entry) {
    std::string known;
    for (const auto& e : model_registry()) known += std::string(known.empty() ? "" : ", ") + e.architecture;
    fail(cfg_path, ": architecture \"", arch, "\" is not supported (nibble runs: ", known, ")");
  }
  return *entry;
}

Plan plan_model(const Checkpoint& ck, const Detection& det, const Device& device, const PlanOptions& options) {
  check_methods_supported(ck.path(), det);
  const ModelEntry* entry = nullptr;
  const nlohmann::json& cfg = ck.config();
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    for (const auto& e : model_registry())
      if ((*a)[0].get<std::string>() == e.architecture) entry = &e;
  // A checkpoint of an architecture nibble does not run is still planned
  // (explain shows what its kernels would be), grouped by the DeepSeek / HF
  // tensor naming: what the planner did for every checkpoint before layouts.
  const ModelLayout layout = entry ? entry->layout(ck, det) : deepseek_v4_layout(ck, det);
  return make_plan(ck.path(), det, layout, device, options);
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  return load_model(Checkpoint::open(path), options);
}

std::unique_ptr<Model> load_model(std::unique_ptr<Checkpoint> ck, const LoadOptions& options) {
  const ModelEntry& entry = model_entry(*ck);  // before detection: an unknown model is named for its architecture
  Detection det = detect_formats(*ck);
  Device device = named_device(options.device, options.threads, options.bandwidth_gbps);
  Plan plan = make_plan(ck->path(), det, entry.layout(*ck, det), device, options.plan);
  return entry.load(std::move(ck), det, std::move(plan), options);
}

}  // namespace nibble
