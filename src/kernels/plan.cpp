#include "kernels/plan.h"

#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Replaces the number after each `word` ("layers.") with `letter`.
std::string fold_after(const std::string& s, const std::string& word, const char* letter) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, word.size(), word) == 0 && i + word.size() < s.size() && is_digit(s[i + word.size()])) {
      out += word + letter;
      i += word.size();
      while (i < s.size() && is_digit(s[i])) ++i;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// "layers.12.ffn.experts.7.w1" -> "layers.N.ffn.experts.E.w1": provenance is
// the same for every layer and expert of a group once numbers are folded.
std::string fold_indices(const std::string& s) {
  return fold_after(fold_after(s, "layers.", "N"), "experts.", "E");
}

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
    if (t.name.rfind("mtp.", 0) != 0) max_expert = std::max(max_expert, expert_index(t.name));
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

std::string join_unique(const std::vector<std::string>& items) {
  std::vector<std::string> seen;
  for (const auto& s : items)
    if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : " | ") + s;
  return out;
}

}  // namespace

std::string tensor_group(const std::string& full) {
  const bool mtp = full.rfind("mtp.", 0) == 0;
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

Plan make_plan(const Checkpoint& ck, const Detection& det, const Device& device, const PlanOptions& opt) {
  if (!det.unsupported.empty()) {
    const auto& u = det.unsupported.front();
    fail(ck.path(), ": quantization method '", u.method, "' (", u.source,
         u.tensor.empty() ? "" : ", tensor " + u.tensor, ") is not supported by nibble yet",
         det.unsupported.size() > 1 ? " (and " + std::to_string(det.unsupported.size() - 1) + " more)" : "");
  }
  check_config(ck, det);

  const json& cfg = ck.config();
  Plan plan;
  plan.device = device;
  plan.backend = device.kind == DeviceKind::cpu ? "cpu" : "";
  plan.metadata_schema = det.metadata_schema;
  // The same warning for every layer and expert reads as one, with a count.
  std::vector<std::string> folded;
  std::map<std::string, int> counts;
  for (const auto& w : det.warnings)
    if (counts[fold_indices(w)]++ == 0) folded.push_back(fold_indices(w));
  for (const auto& w : folded)
    plan.warnings.push_back(counts[w] > 1 ? w + " [" + std::to_string(counts[w]) + " tensors]" : w);
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    plan.architecture = (*a)[0].get<std::string>();
  plan.layers = config_int(cfg, {"num_hidden_layers"}, 0);
  const int64_t n_experts = config_int(cfg, {"n_routed_experts", "num_local_experts"}, 0);
  const int64_t top_k = config_int(cfg, {"num_experts_per_tok"}, 0);

  // Group by (group, format, is matrix) in name order.
  using Key = std::tuple<std::string, Format, bool>;
  std::map<Key, std::vector<const DetectedTensor*>> groups;
  std::vector<Key> order;
  for (const auto& t : det.tensors) {
    // DeepSeek counts its MTP layer apart (284B for V4-Flash is without it).
    (t.name.rfind("mtp.", 0) == 0 ? plan.mtp_params : plan.params) += t.params;
    Key k{tensor_group(t.name), t.format, t.is_matrix};
    auto [it, fresh] = groups.try_emplace(k);
    if (fresh) order.push_back(k);
    it->second.push_back(&t);
  }
  std::sort(order.begin(), order.end());

  for (const auto& key : order) {
    const auto& members = groups[key];
    GroupPlan g;
    g.group = std::get<0>(key);
    g.format = std::get<1>(key);
    g.tensors = int64_t(members.size());
    std::vector<std::string> provs;
    const DetectedTensor* largest = members.front();
    for (const auto* t : members) {
      g.bytes += t->bytes;
      g.params += t->params;
      provs.push_back(fold_indices(t->provenance));
      if (t->bytes > largest->bytes) largest = t;
    }
    g.provenance = join_unique(provs);

    // What one decoded token reads of this group.
    const bool mtp = g.group.rfind("mtp_", 0) == 0;
    const bool routed = g.group == "routed_experts" || g.group == "mtp_routed_experts";
    if (mtp) {
      g.bytes_per_token = 0;
      g.note = "MTP layer: loaded and validated; speculative decoding with it is not implemented, so decode does not read it";
    } else if (routed) {
      if (n_experts <= 0 || top_k <= 0)
        fail(ck.file_path("config.json"), ": routed experts present but field \"",
             n_experts <= 0 ? "n_routed_experts" : "num_experts_per_tok", "\" is ",
             (n_experts <= 0 ? n_experts : top_k) == 0 ? std::string("missing")
                                                      : "not positive: " + std::to_string(n_experts <= 0 ? n_experts : top_k));
      g.bytes_per_token = g.bytes / uint64_t(n_experts) * uint64_t(top_k);
    } else if (g.group == "embedding" || (g.format == Format::int_index && g.group == "router")) {
      // A lookup reads one row per token.
      for (const auto* t : members)
        if (!t->parts[0]->shape.empty() && t->parts[0]->shape[0] > 0)
          g.bytes_per_token += t->bytes / uint64_t(t->parts[0]->shape[0]);
      g.note = g.group == "embedding" ? "row lookup per token" : "hash-routing table: one row per token";
    } else {
      g.bytes_per_token = g.bytes;
    }

    if (g.group == "embedding") {
      // not a matrix op
    } else if (std::get<2>(key) && g.format != Format::int_index) {
      g.has_op = true;
      g.op = routed ? Op::moe : Op::linear;
      OpShape shape;
      shape.op = g.op;
      shape.format = g.format;
      shape.rows = largest->rows;
      shape.cols = largest->cols;
      shape.batch = opt.batch;
      shape.bytes = double(mtp || g.bytes_per_token == 0 ? g.bytes : g.bytes_per_token);
      shape.flops = 2.0 * double(routed ? g.params / uint64_t(std::max<int64_t>(n_experts, 1)) * uint64_t(std::max<int64_t>(top_k, 1)) : g.params) * double(opt.batch);
      g.selection = select_kernel(kernel_registry(), shape, device,
                                  routed ? opt.moe_backend : opt.linear_backend,
                                  routed ? "--moe-backend" : "--linear-backend");
      if (!g.selection.chosen)
        plan.warnings.push_back("no kernel can run " + g.group + " (" + format_name(g.format) + ", " +
                                op_name(g.op) + ") on " + device.name);
    } else if (g.note.empty()) {
      g.note = "elementwise math in the model (f32)";
    }
    plan.bytes_per_token += g.bytes_per_token;
    plan.groups.push_back(std::move(g));
  }
  if (plan.bytes_per_token > 0 && device.bandwidth_gbps > 0)
    plan.bound_tokens_per_s = device.bandwidth_gbps * 1e9 / double(plan.bytes_per_token);
  return plan;
}

}  // namespace nibble
