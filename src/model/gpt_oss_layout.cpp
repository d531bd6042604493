#include "model/gpt_oss_layout.h"

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

// N in "model.layers.N.", or -1.
int64_t layer_index(const std::string& name) {
  const std::string word = "model.layers.";
  if (name.compare(0, word.size(), word) != 0) return -1;
  int64_t v = -1;
  for (size_t i = word.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    v = (v < 0 ? 0 : v * 10) + (name[i] - '0');
  return v;
}

}  // namespace

TensorGroup gpt_oss_tensor_group(const std::string& name, Format format) {
  (void)format;
  TensorGroup g;
  const std::string n = name + ".";
  if (has(n, ".mlp.experts.")) {
    g.name = "routed_experts";
    g.routed = true;
    g.read = DecodeRead::top_k_experts;
    if (has(n, "_bias.")) g.note = "expert biases (f32 copies), top-k rows per token";
  } else if (has(n, ".mlp.router.")) {
    g.name = "router";
    if (has(n, ".bias.")) g.note = "router bias, added to the logits";
  } else if (has(n, "layernorm.") || n == "model.norm.") {
    g.name = "norms";
  } else if (has(n, ".self_attn.")) {
    g.name = "attention";
    // Biases and sinks are one (group, format) key: one note for both.
    if (has(n, ".sinks.") || has(n, ".bias.")) g.note = "projection biases and sinks (one logit per head joins each softmax)";
  } else if (n == "model.embed_tokens.") {
    g.name = "embedding";
    g.read = DecodeRead::one_row;
    g.note = "row lookup per token";
  } else if (n == "lm_head.") {
    g.name = "lm_head";
  } else {
    g.name = "other";
  }
  return g;
}

ModelLayout gpt_oss_layout(const Checkpoint& ck, const Detection& det) {
  const json& cfg = ck.config();
  const std::string cfg_path = ck.file_path("config.json");
  ModelLayout layout;
  layout.architecture = "GptOssForCausalLM";
  layout.layers = config_int(cfg, {"num_hidden_layers"}, 0);
  layout.routed_experts = config_int(cfg, {"num_local_experts"}, 0);
  layout.experts_per_token = config_int(cfg, {"num_experts_per_tok", "experts_per_token"}, 0);
  layout.index_words = {{"layers.", "N"}};
  int64_t max_layer = -1;
  bool routed = false;
  for (const auto& t : det.tensors) {
    layout.tensors.push_back(gpt_oss_tensor_group(t.name, t.format));
    routed = routed || layout.tensors.back().routed;
    max_layer = std::max(max_layer, layer_index(t.name));
    const auto& shape = t.parts[0]->shape;
    if (t.name == "model.embed_tokens" && shape.size() == 2) {
      const int64_t hidden = config_int(cfg, {"hidden_size"}, -1), vocab = config_int(cfg, {"vocab_size"}, -1);
      if (hidden >= 0 && hidden != shape[1])
        fail(cfg_path, ": hidden_size = ", hidden, " contradicts tensor ", t.parts[0]->name, " dim 1 (", shape[1], ")");
      if (vocab >= 0 && vocab != shape[0])
        fail(cfg_path, ": vocab_size = ", vocab, " contradicts tensor ", t.parts[0]->name, " dim 0 (", shape[0], ")");
    }
    if (has(t.name, ".mlp.experts.") && t.format == Format::mxfp4 && shape.size() == 4 && layout.routed_experts > 0 &&
        shape[0] != layout.routed_experts)
      fail(cfg_path, ": num_local_experts = ", layout.routed_experts, " contradicts tensor ", t.parts[0]->name, " ",
           t.parts[0]->shape_str());
  }
  if (layout.layers > 0 && max_layer >= 0 && layout.layers != max_layer + 1)
    fail(cfg_path, ": num_hidden_layers = ", layout.layers, " but the checkpoint has layers 0..", max_layer);
  if (routed && (layout.routed_experts <= 0 || layout.experts_per_token <= 0))
    fail(cfg_path, ": routed experts present but field \"",
         layout.routed_experts <= 0 ? "num_local_experts" : "num_experts_per_tok", "\" is missing or not positive");
  return layout;
}

}  // namespace nibble
