#include "model/deepseek_v4_layout.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The number right after `word` in `name` ("layers." in "layers.3.attn"), or -1.
int64_t index_after(const std::string& name, const std::string& word, bool at_start) {
  size_t pos = name.find(word);
  if (pos == std::string::npos || (at_start && pos != 0)) return -1;
  size_t i = pos + word.size();
  if (i >= name.size() || !is_digit(name[i])) return -1;
  int64_t v = 0;
  while (i < name.size() && is_digit(name[i]) && v < (int64_t(1) << 40)) v = v * 10 + (name[i++] - '0');
  return v;
}

// The first of `keys` config.json holds as an integer, else `fallback`: explain
// plans checkpoints whose config.json states only some dimensions.
int64_t config_int(const json& cfg, std::initializer_list<const char*> keys, int64_t fallback) {
  for (const char* k : keys) {
    auto it = cfg.find(k);
    if (it != cfg.end() && it->is_number_integer()) return it->get<int64_t>();
  }
  return fallback;
}

// Index after "layers." in a main-model tensor name, or -1.
int64_t layer_index(const std::string& name) {
  int64_t i = index_after(name, "layers.", true);
  return i >= 0 ? i : index_after(name, "model.layers.", true);
}

int64_t expert_index(const std::string& name) { return index_after(name, ".experts.", false); }

bool is_mtp(const std::string& name) { return name.rfind("mtp.", 0) == 0; }

// The group's name alone (the MTP layer's groups carry an "mtp_" prefix).
std::string group_name(const std::string& full) {
  const bool mtp = is_mtp(full);
  const std::string p = mtp ? "mtp_" : "";
  const std::string n = full + ".";  // so "layers.0.ffn.gate" matches ".ffn.gate."
  if (has(n, ".shared_experts.") || has(n, ".shared_expert.")) return p + "shared_experts";
  if (has(n, ".experts.")) return p + "routed_experts";
  if (has(n, ".ffn.gate.") || has(n, ".mlp.gate.") || has(n, ".router.")) return p + "router";
  if (has(n, "norm")) return p + "norms";  // every RMSNorm weight, compressor ones included
  if (has(n, ".compressor.") && !has(n, ".indexer.")) return p + "attention_compressor";
  if (has(n, ".indexer.")) return p + "attention_indexer";
  if (has(n, "hc_")) return p + "hyper_connections";
  if (has(n, ".attn.") || has(n, ".self_attn.")) return p + "attention";
  if (mtp && (has(n, "e_proj") || has(n, "h_proj"))) return "mtp_projections";
  if (n == "embed." || has(n, "embed_tokens.")) return "embedding";
  if (n == "head." || has(n, "lm_head.")) return "lm_head";
  if (has(n, ".mlp.") || has(n, ".ffn.")) return p + "mlp";
  return p + "other";
}

// config.json must agree with the tensors on the dimensions explain reports.
void check_config(const Checkpoint& ck, const Detection& det) {
  const json& cfg = ck.config();
  const std::string cfg_path = ck.file_path("config.json");
  const DetectedTensor* embed = nullptr;
  int64_t max_layer = -1, max_expert = -1;
  const DetectedTensor* w1 = nullptr;
  for (const auto& t : det.tensors) {
    if (t.name == "embed" || t.name == "model.embed_tokens" || t.name == "embed_tokens") embed = &t;
    max_layer = std::max(max_layer, layer_index(t.name));
    if (!is_mtp(t.name)) max_expert = std::max(max_expert, expert_index(t.name));
    if (!w1 && t.is_matrix && has(t.name, ".experts.") && !has(t.name, "shared") &&
        (t.name.size() > 3 && t.name.compare(t.name.size() - 3, 3, ".w1") == 0))
      w1 = &t;
  }
  auto contradiction = [&](const char* field, int64_t cfg_v, const std::string& tensor, int64_t v) {
    fail(cfg_path, ": ", field, " = ", cfg_v, " contradicts tensor ", tensor, " (", v, ")");
  };
  if (embed && embed->parts[0]->shape.size() == 2) {
    const auto& shape = embed->parts[0]->shape;
    int64_t hidden = config_int(cfg, {"hidden_size"}, -1), vocab = config_int(cfg, {"vocab_size"}, -1);
    if (hidden >= 0 && hidden != shape[1]) contradiction("hidden_size", hidden, embed->parts[0]->name + " dim 1", shape[1]);
    if (vocab >= 0 && vocab != shape[0]) contradiction("vocab_size", vocab, embed->parts[0]->name + " dim 0", shape[0]);
  }
  int64_t layers = config_int(cfg, {"num_hidden_layers"}, -1);
  if (layers >= 0 && max_layer >= 0 && layers != max_layer + 1)
    fail(cfg_path, ": num_hidden_layers = ", layers, " but the checkpoint has layers 0..", max_layer);
  int64_t experts = config_int(cfg, {"n_routed_experts", "num_local_experts"}, -1);
  if (experts >= 0 && max_expert >= 0 && experts != max_expert + 1)
    fail(cfg_path, ": n_routed_experts = ", experts, " but the checkpoint has experts 0..", max_expert);
  int64_t inter = config_int(cfg, {"moe_intermediate_size"}, -1);
  if (inter >= 0 && w1 && w1->rows != inter) contradiction("moe_intermediate_size", inter, w1->name, w1->rows);
}

}  // namespace

TensorGroup deepseek_v4_tensor_group(const std::string& name, Format format) {
  TensorGroup g;
  g.name = group_name(name);
  // DeepSeek counts its MTP layer apart (284B for V4-Flash is without it).
  g.counted_apart = is_mtp(name);
  g.routed = g.name == "routed_experts" || g.name == "mtp_routed_experts";
  if (g.name.rfind("mtp_", 0) == 0) {
    g.read = DecodeRead::none;
    g.note = "MTP layer: the draft of speculative decoding (off by default); plain decode does not read it";
  } else if (g.routed) {
    g.read = DecodeRead::top_k_experts;
  } else if (g.name == "embedding") {
    g.read = DecodeRead::one_row;
    g.note = "row lookup per token";
  } else if (g.name == "router" && format == Format::int_index) {
    g.read = DecodeRead::one_row;  // tid2eid: the hash layers' expert ids, by token id
    g.note = "hash-routing table: one row per token";
  }
  return g;
}

ModelLayout deepseek_v4_layout(const Checkpoint& ck, const Detection& det) {
  check_config(ck, det);
  const json& cfg = ck.config();
  ModelLayout layout;
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    layout.architecture = (*a)[0].get<std::string>();
  layout.layers = config_int(cfg, {"num_hidden_layers"}, 0);
  layout.routed_experts = config_int(cfg, {"n_routed_experts", "num_local_experts"}, 0);
  layout.experts_per_token = config_int(cfg, {"num_experts_per_tok"}, 0);
  layout.index_words = {{"layers.", "N"}, {"experts.", "E"}};
  layout.runs_on_cuda = true;  // model/cuda_backend.h has every op of its forward
  layout.tensors.reserve(det.tensors.size());
  bool routed = false;
  for (const auto& t : det.tensors) {
    layout.tensors.push_back(deepseek_v4_tensor_group(t.name, t.format));
    routed = routed || layout.tensors.back().read == DecodeRead::top_k_experts;
  }
  // The bytes a token reads of the experts need both counts.
  const int64_t n = layout.routed_experts, k = layout.experts_per_token;
  if (routed && (n <= 0 || k <= 0))
    fail(ck.file_path("config.json"), ": routed experts present but field \"",
         n <= 0 ? "n_routed_experts" : "num_experts_per_tok", "\" is ",
         (n <= 0 ? n : k) == 0 ? std::string("missing") : "not positive: " + std::to_string(n <= 0 ? n : k));
  return layout;
}

}  // namespace nibble
