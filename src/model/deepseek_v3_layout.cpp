#include "model/deepseek_v3_layout.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int64_t config_int(const json& cfg, std::initializer_list<const char*> keys, int64_t fallback) {
  for (const char* k : keys)
    if (auto it = cfg.find(k); it != cfg.end() && it->is_number_integer()) return it->get<int64_t>();
  return fallback;
}

// The number right after `word` in `name`, or -1.
int64_t index_after(const std::string& name, const std::string& word) {
  const size_t pos = name.find(word);
  if (pos == std::string::npos) return -1;
  int64_t v = -1;
  for (size_t i = pos + word.size(); i < name.size() && name[i] >= '0' && name[i] <= '9' && v < (int64_t(1) << 40); ++i)
    v = (v < 0 ? 0 : v * 10) + (name[i] - '0');
  return v;
}

int64_t layer_index(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 ? index_after(name, "model.layers.") : -1;
}

}  // namespace

TensorGroup deepseek_v3_tensor_group(const std::string& name, int64_t n_layers) {
  TensorGroup g;
  const std::string n = name + ".";
  const int64_t layer = layer_index(name);
  const bool mtp = n_layers > 0 && layer >= n_layers;
  const std::string p = mtp ? "mtp_" : "";
  if (has(n, ".shared_experts.")) g.name = p + "shared_experts";
  else if (has(n, ".mlp.experts.")) g.name = p + "routed_experts";
  else if (has(n, ".mlp.gate.")) g.name = p + "router";
  else if (has(n, "norm.")) g.name = p + "norms";  // layernorms, model.norm, MTP enorm / hnorm / shared_head.norm
  else if (has(n, ".self_attn.")) g.name = p + "attention";
  else if (has(n, ".mlp.")) g.name = p + "mlp";
  else if (mtp && (has(n, ".eh_proj.") || has(n, ".shared_head.head."))) g.name = "mtp_projections";
  else if (mtp && has(n, ".embed_tokens.")) g.name = "mtp_embedding";
  else if (n == "model.embed_tokens.") g.name = "embedding";
  else if (n == "lm_head.") g.name = "lm_head";
  else g.name = p + "other";
  g.counted_apart = mtp;
  g.routed = g.name == "routed_experts" || g.name == "mtp_routed_experts";
  if (mtp) {
    g.read = DecodeRead::none;
    g.note = "MTP layer: the draft of speculative decoding (off by default); plain decode does not read it";
  } else if (g.routed) {
    g.read = DecodeRead::top_k_experts;
  } else if (g.name == "embedding") {
    g.read = DecodeRead::one_row;
    g.note = "row lookup per token";
  } else if (g.name == "router" && has(n, ".e_score_correction_bias.")) {
    g.note = "selection bias (e_score_correction_bias), added to the sigmoid scores for the choice only";
  }
  return g;
}

ModelLayout deepseek_v3_layout(const Checkpoint& ck, const Detection& det) {
  const json& cfg = ck.config();
  const std::string cfg_path = ck.file_path("config.json");
  ModelLayout layout;
  layout.architecture = "DeepseekV3ForCausalLM";
  layout.layers = config_int(cfg, {"num_hidden_layers"}, 0);
  layout.routed_experts = config_int(cfg, {"n_routed_experts", "num_local_experts"}, 0);
  layout.experts_per_token = config_int(cfg, {"num_experts_per_tok"}, 0);
  layout.index_words = {{"layers.", "N"}, {"experts.", "E"}};
  const int64_t n_mtp = config_int(cfg, {"num_nextn_predict_layers", "num_mtp_layers"}, 0);
  const int64_t hidden = config_int(cfg, {"hidden_size"}, -1), vocab = config_int(cfg, {"vocab_size"}, -1);
  const int64_t moe_inter = config_int(cfg, {"moe_intermediate_size"}, -1);
  int64_t max_layer = -1, max_expert = -1;
  bool routed = false;
  for (const auto& t : det.tensors) {
    layout.tensors.push_back(deepseek_v3_tensor_group(t.name, layout.layers));
    routed = routed || layout.tensors.back().routed;
    const int64_t l = layer_index(t.name);
    max_layer = std::max(max_layer, l);
    if (layout.layers <= 0 || l < layout.layers) max_expert = std::max(max_expert, index_after(t.name, ".mlp.experts."));
    const auto& shape = t.parts[0]->shape;
    if (t.name == "model.embed_tokens" && shape.size() == 2) {
      if (hidden >= 0 && hidden != shape[1])
        fail(cfg_path, ": hidden_size = ", hidden, " contradicts tensor ", t.parts[0]->name, " dim 1 (", shape[1], ")");
      if (vocab >= 0 && vocab != shape[0])
        fail(cfg_path, ": vocab_size = ", vocab, " contradicts tensor ", t.parts[0]->name, " dim 0 (", shape[0], ")");
    }
    if (moe_inter > 0 && t.is_matrix && has(t.name, ".mlp.experts.") && has(t.name + ".", ".gate_proj.") &&
        t.rows != moe_inter)
      fail(cfg_path, ": moe_intermediate_size = ", moe_inter, " contradicts tensor ", t.parts[0]->name, " (", t.rows,
           " rows)");
  }
  if (layout.layers > 0 && max_layer >= 0 && max_layer + 1 != layout.layers && max_layer + 1 != layout.layers + n_mtp)
    fail(cfg_path, ": num_hidden_layers = ", layout.layers, " (+ num_nextn_predict_layers = ", n_mtp,
         ") but the checkpoint has layers 0..", max_layer);
  if (layout.routed_experts > 0 && max_expert >= 0 && max_expert + 1 != layout.routed_experts)
    fail(cfg_path, ": n_routed_experts = ", layout.routed_experts, " but the checkpoint has experts 0..", max_expert);
  if (routed && (layout.routed_experts <= 0 || layout.experts_per_token <= 0))
    fail(cfg_path, ": routed experts present but field \"",
         layout.routed_experts <= 0 ? "n_routed_experts" : "num_experts_per_tok", "\" is missing or not positive");
  return layout;
}

}  // namespace nibble
