#include "kernels/plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "kernels/cuda/weight_store.h"
#include "util/error.h"

namespace nibble {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Replaces the number after each `word` ("layers.") with `letter`.
std::string fold_after(const std::string& s, const std::string& word, const std::string& letter) {
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
std::string fold_indices(std::string s, const ModelLayout& layout) {
  for (const auto& [word, letter] : layout.index_words) s = fold_after(s, word, letter);
  return s;
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

void check_methods_supported(const std::string& path, const Detection& det) {
  if (det.unsupported.empty()) return;
  const auto& u = det.unsupported.front();
  fail(path, ": quantization method '", u.method, "' (", u.source,
       u.tensor.empty() ? "" : ", tensor " + u.tensor, ") is not supported by nibble yet",
       det.unsupported.size() > 1 ? " (and " + std::to_string(det.unsupported.size() - 1) + " more)" : "");
}

Plan make_plan(const std::string& path, const Detection& det, const ModelLayout& layout, const Device& device,
               const PlanOptions& opt) {
  check_methods_supported(path, det);
  if (layout.tensors.size() != det.tensors.size())
    fail(path, ": the ", layout.architecture, " layout names ", layout.tensors.size(), " tensors but detection found ",
         det.tensors.size());

  Plan plan;
  plan.device = device;
  plan.backend = device.kind == DeviceKind::cpu ? "cpu" : layout.runs_on_cuda ? "cuda" : "";
  plan.metadata_schema = det.metadata_schema;
  // The same warning for every layer and expert reads as one, with a count.
  std::vector<std::string> folded;
  std::map<std::string, int> counts;
  for (const auto& w : det.warnings)
    if (counts[fold_indices(w, layout)]++ == 0) folded.push_back(fold_indices(w, layout));
  for (const auto& w : folded)
    plan.warnings.push_back(counts[w] > 1 ? w + " [" + std::to_string(counts[w]) + " tensors]" : w);
  plan.architecture = layout.architecture;
  plan.layers = layout.layers;
  const int64_t n_experts = layout.routed_experts;
  const int64_t top_k = layout.experts_per_token;

  // Group by (group, format, is matrix) in name order.
  using Key = std::tuple<std::string, Format, bool>;
  struct Members {
    const TensorGroup* role = nullptr;  // the first member's; the others must agree
    std::vector<const DetectedTensor*> tensors;
  };
  std::map<Key, Members> groups;
  std::vector<Key> order;
  for (size_t i = 0; i < det.tensors.size(); ++i) {
    const DetectedTensor& t = det.tensors[i];
    const TensorGroup& role = layout.tensors[i];
    (role.counted_apart ? plan.mtp_params : plan.params) += t.params;
    Key k{role.name, t.format, t.is_matrix};
    auto [it, fresh] = groups.try_emplace(k);
    if (fresh) {
      order.push_back(k);
      it->second.role = &role;
    } else if (role.read != it->second.role->read || role.routed != it->second.role->routed ||
               role.note != it->second.role->note) {
      fail(path, ": the ", layout.architecture, " layout puts tensor ", t.name, " in group ", role.name,
           " but reads it unlike the group's other ", format_name(t.format), " tensors");
    }
    it->second.tensors.push_back(&t);
  }
  std::sort(order.begin(), order.end());

  for (const auto& key : order) {
    const auto& members = groups[key].tensors;
    const TensorGroup& role = *groups[key].role;
    GroupPlan g;
    g.group = std::get<0>(key);
    g.format = std::get<1>(key);
    g.tensors = int64_t(members.size());
    std::vector<std::string> provs;
    const DetectedTensor* largest = members.front();
    for (const auto* t : members) {
      g.bytes += t->bytes;
      g.device_bytes += device.kind == DeviceKind::cuda
                            ? cuda_layout_bytes(t->format, t->is_matrix, t->rows, t->cols, t->bytes)
                            : t->bytes;
      g.params += t->params;
      provs.push_back(fold_indices(t->provenance, layout));
      if (t->bytes > largest->bytes) largest = t;
    }
    g.provenance = join_unique(provs);

    // What one decoded token reads of this group.
    const bool routed = role.routed;
    g.note = role.note;
    switch (role.read) {
      case DecodeRead::none:
        g.bytes_per_token = 0;
        break;
      case DecodeRead::top_k_experts:
        if (n_experts <= 0 || top_k <= 0)
          fail(path, ": the ", layout.architecture, " layout has routed experts (", g.group,
               ") but no expert counts");
        g.bytes_per_token = g.bytes / uint64_t(n_experts) * uint64_t(top_k);
        break;
      case DecodeRead::one_row:
        for (const auto* t : members)
          if (!t->parts[0]->shape.empty() && t->parts[0]->shape[0] > 0)
            g.bytes_per_token += t->bytes / uint64_t(t->parts[0]->shape[0]);
        break;
      case DecodeRead::all:
        g.bytes_per_token = g.bytes;
        break;
    }

    if (role.read == DecodeRead::one_row) {
      // a lookup, not a matrix op
    } else if (std::get<2>(key) && g.format != Format::int_index) {
      g.has_op = true;
      g.op = routed ? Op::moe : Op::linear;
      OpShape shape;
      shape.op = g.op;
      shape.format = g.format;
      shape.rows = largest->rows;
      shape.cols = largest->cols;
      shape.batch = opt.batch;
      shape.bytes = double(role.read == DecodeRead::none || g.bytes_per_token == 0 ? g.bytes : g.bytes_per_token);
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
    plan.device_bytes += g.device_bytes;
    plan.groups.push_back(std::move(g));
  }
  if (plan.bytes_per_token > 0 && device.bandwidth_gbps > 0)
    plan.bound_tokens_per_s = device.bandwidth_gbps * 1e9 / double(plan.bytes_per_token);
  // The weights alone must fit the GPU (KV caches and activations need more
  // on top); nibble runs a model on one device.
  if (device.kind == DeviceKind::cuda && device.memory_bytes > 0 && plan.device_bytes > device.memory_bytes) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "the weights need %.1f GB on %s, which has %.1f GB: they do not fit on one GPU",
                  double(plan.device_bytes) / 1e9, device.name.c_str(), double(device.memory_bytes) / 1e9);
    plan.warnings.push_back(msg);
  }
  return plan;
}

}  // namespace nibble
