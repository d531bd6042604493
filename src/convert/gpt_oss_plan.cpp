#include "convert/gpt_oss_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <nlohmann/json.hpp>

#include "convert/source_pages.h"
#include "format/block.h"
#include "util/error.h"

namespace nibble {

namespace {

namespace fs = std::filesystem;

constexpr const char* kProj[2] = {"gate_up_proj", "down_proj"};

// One layer's experts as found: the published stacked tensors, or the
// per-expert ones convert writes (index -> tensor), per projection.
struct LayerExperts {
  std::string module;  // "model.layers.3.mlp.experts"
  int64_t layer = 0;
  const DetectedTensor* stacked[2] = {nullptr, nullptr};
  std::map<int64_t, const DetectedTensor*> per_expert[2];
};

int proj_index(const std::string& p) { return p == "gate_up_proj" ? 0 : 1; }

double config_number(const Checkpoint& ck, const char* key, double fallback) {
  auto it = ck.config().find(key);
  return (it != ck.config().end() && it->is_number()) ? it->get<double>() : fallback;
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

// input_scale of a converted expert (docs/convert.md, "gpt-oss input_scale"):
// a data-free bound on what the projection reads, / 2688 as ModelOpt's.
//  - gate_up reads post_attention_layernorm(x) = x / rms(x) * gamma, and
//    |x_i| / rms(x) <= sqrt(D): |input| <= sqrt(D) * max|gamma|.
//  - down reads h = (clamp(up, -L, L) + 1) * g * sigmoid(alpha g) with
//    g = min(gate, L): |up + 1| <= L + 1, and g * sigmoid(alpha g) rises from
//    its minimum -0.2785 / alpha (at alpha g = -1.278) to L * sigmoid(alpha L)
//    at the clamp, so |h| <= (L + 1) * max(L sigmoid(alpha L), 0.2785 / alpha).
//    gpt-oss applies the routing weight after down_proj, so it is no factor.
float gate_up_input_scale(const Checkpoint& ck, const LayerExperts& l, int64_t cols, std::vector<std::string>* warnings) {
  const std::string norm = "model.layers." + std::to_string(l.layer) + ".post_attention_layernorm.weight";
  auto g = vector_amax(ck, norm);
  if (!g) {
    warnings->push_back(norm + " is missing or not BF16/F32: the input_scale of " + l.module +
                        ".*.gate_up_proj assumes max|gamma| = 1");
    g = 1.0f;
  }
  return float(std::sqrt(double(cols)) * double(*g)) / 2688.0f;
}

float down_input_scale(const Checkpoint& ck, std::vector<std::string>* warnings) {
  double limit = config_number(ck, "swiglu_limit", 7.0);  // transformers' GptOssConfig default
  if (!(limit > 0)) {
    warnings->push_back("config.json swiglu_limit is " + std::to_string(limit) +
                        ": no clamp bounds the down_proj input; input_scale assumes a limit of 7");
    limit = 7.0;
  }
  const double alpha = config_number(ck, "swiglu_alpha", 1.702);  // hard-coded in transformers' GptOssExperts
  const double glu = std::max(limit / (1.0 + std::exp(-alpha * limit)), 0.2785 / alpha);
  return float((limit + 1.0) * glu) / 2688.0f;
}

// The NaN scale code 0xFF anywhere in a stacked _scales tensor, named by its
// [expert, row, block] index.
void check_stacked_scales(const DetectedTensor& t) {
  const TensorInfo& s = *t.parts[1];
  const uint8_t* p = s.data;
  const uint64_t n = s.nbytes;
  uint8_t hi = 0;
  for (uint64_t i = 0; i < n; ++i) hi = std::max(hi, p[i]);
  if (hi != 0xFF) return;
  const int64_t per_row = s.shape.back(), rows = s.shape[s.shape.size() - 2];
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] == 0xFF)
      fail(s.file, ": tensor ", s.name, " element [", int64_t(i) / (rows * per_row), ", ", (int64_t(i) / per_row) % rows,
           ", ", int64_t(i) % per_row, "] is the NaN scale code 0xFF (E8M0); nothing was written");
}

}  // namespace

bool is_gpt_oss(const Checkpoint& ck) {
  const auto& cfg = ck.config();
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    return (*a)[0].get<std::string>() == "GptOssForCausalLM";
  auto mt = cfg.find("model_type");
  return mt != cfg.end() && mt->is_string() && mt->get<std::string>() == "gpt_oss";
}

PlannedExperts plan_gpt_oss_experts(const Checkpoint& ck, const Detection& det, Format target,
                                    const PlanProgress& progress) {
  static const std::regex stacked_re(R"(^(model\.layers\.(\d+)\.mlp\.experts)\.(gate_up_proj|down_proj)$)");
  static const std::regex expert_re(R"(^(model\.layers\.(\d+)\.mlp\.experts)\.(\d+)\.(gate_up_proj|down_proj)$)");
  const std::string cfg_path = ck.file_path("config.json");
  PlannedExperts plan;

  // ---- What each layer holds --------------------------------------------------
  std::map<int64_t, LayerExperts> layers;
  for (const DetectedTensor& t : det.tensors) {
    std::smatch m;
    if (std::regex_match(t.name, m, stacked_re)) {
      const TensorInfo& w = *t.parts[0];
      if (!t.is_matrix || t.format != Format::mxfp4)
        fail(w.file, ": tensor ", w.name, " (", dtype_name(w.dtype), " ", w.shape_str(), ") holds stacked gpt-oss experts ",
             "that are not MXFP4 _blocks / _scales; convert rewrites gpt-oss's published MXFP4 experts and the ",
             "per-expert NVFP4 layout it writes");
      if (w.shape.size() != 4)
        fail(w.file, ": tensor ", w.name, " has shape ", w.shape_str(), "; gpt-oss's stacked experts are [experts, rows, ",
             "cols/32, 16]");
      LayerExperts& l = layers[std::stoll(m[2])];
      l.module = m[1];
      l.layer = std::stoll(m[2]);
      l.stacked[proj_index(m[3])] = &t;
    } else if (std::regex_match(t.name, m, expert_re)) {
      const TensorInfo& w = *t.parts[0];
      if (!t.is_matrix || t.format != Format::nvfp4)
        fail(w.file, ": tensor ", w.name, " is a per-expert gpt-oss expert in ",
             t.is_matrix ? format_name(t.format) : dtype_name(w.dtype),
             "; convert reads per-expert experts in NVFP4 (the layout it writes) and the published stacked MXFP4");
      LayerExperts& l = layers[std::stoll(m[2])];
      l.module = m[1];
      l.layer = std::stoll(m[2]);
      l.per_expert[proj_index(m[4])][std::stoll(m[3])] = &t;
    }
  }
  const int64_t n_experts = int64_t(config_number(ck, "num_local_experts", 0));

  // ---- Per layer: stacked MXFP4 or a complete per-expert NVFP4 set -----------------
  struct Scan {
    const DetectedTensor* t;
    LayerExperts* layer;
    int proj;
  };
  std::vector<Scan> to_nv;  // stacked tensors to cast
  std::vector<std::pair<LayerExperts*, int>> to_mx;  // per-expert sets to stack
  for (auto& [index, l] : layers) {
    const bool any_stacked = l.stacked[0] || l.stacked[1];
    const bool any_expert = !l.per_expert[0].empty() || !l.per_expert[1].empty();
    if (any_stacked && any_expert) {
      const DetectedTensor* s = l.stacked[0] ? l.stacked[0] : l.stacked[1];
      const DetectedTensor* e = (l.per_expert[0].empty() ? l.per_expert[1] : l.per_expert[0]).begin()->second;
      fail(ck.path(), ": layer ", index, " holds both stacked experts (", s->parts[0]->name, ") and per-expert ones (",
           e->parts[0]->name, "); a layer's experts must be in one layout");
    }
    for (int p = 0; p < 2; ++p) {
      const std::string name = l.module + "." + kProj[p];
      if (any_stacked) {
        if (!l.stacked[p])
          fail(ck.path(), ": tensor ", name, "_blocks is missing (layer ", index, " has ", l.module, ".",
               kProj[1 - p], "_blocks)");
        const TensorInfo& w = *l.stacked[p]->parts[0];
        if (n_experts > 0 && w.shape[0] != n_experts)
          fail(w.file, ": tensor ", w.name, " ", w.shape_str(), " stacks ", w.shape[0], " experts but ", cfg_path,
               " num_local_experts is ", n_experts);
        plan.module_formats[l.module].insert(target);
        if (target == Format::mxfp4) plan.kept += w.shape[0];
        else to_nv.push_back({l.stacked[p], &l, p});
        continue;
      }
      // Per expert: experts 0 .. E-1, each with both projections.
      int64_t count = n_experts;
      for (const auto& set : l.per_expert)
        if (!set.empty()) {
          if (n_experts > 0 && set.rbegin()->first >= n_experts)
            fail(ck.path(), ": tensor ", set.rbegin()->second->parts[0]->name, " is expert ", set.rbegin()->first,
                 " but ", cfg_path, " num_local_experts is ", n_experts);
          count = std::max(count, set.rbegin()->first + 1);
        }
      for (int64_t e = 0; e < count; ++e)
        if (!l.per_expert[p].count(e))
          fail(ck.path(), ": tensor ", l.module, ".", e, ".", kProj[p], ".weight is missing (layer ", index, " has ",
               l.per_expert[p].size() + l.per_expert[1 - p].size(), " of the ", 2 * count,
               " per-expert matrices; num_local_experts ", n_experts, ")");
      plan.module_formats[l.module].insert(target);
      if (target == Format::nvfp4) plan.kept += count;
      else to_mx.push_back({&l, p});
    }
  }
  if (layers.empty())
    fail(ck.path(), ": no gpt-oss routed experts (model.layers.N.mlp.experts.gate_up_proj_blocks, or per expert ",
         "model.layers.N.mlp.experts.M.gate_up_proj.weight) were found (metadata: ", det.metadata_schema, ")");

  // ---- Stacked MXFP4 -> per-expert NVFP4: one item per expert slice -----------------
  uint64_t scan_total = 0, scan_done = 0;
  for (const Scan& s : to_nv) scan_total += s.t->parts[1]->nbytes;
  float down_scale = 0;
  if (!to_nv.empty()) down_scale = down_input_scale(ck, &plan.warnings);
  for (const Scan& s : to_nv) {
    check_cancel(progress.cancel);
    const DetectedTensor& t = *s.t;
    const TensorInfo &blocks = *t.parts[0], &scales = *t.parts[1];
    check_stacked_scales(t);
    const int64_t E = blocks.shape[0], rows = blocks.shape[1], cols = t.cols;
    const uint64_t packed_bytes = uint64_t(rows * cols / 2), scale_bytes = uint64_t(rows * cols / kMxfp4Block);
    const float input_scale = s.proj == 0 ? gate_up_input_scale(ck, *s.layer, cols, &plan.warnings) : down_scale;
    for (int64_t e = 0; e < E; ++e) {
      ExpertItem item;
      item.base = s.layer->module + "." + std::to_string(e) + "." + kProj[s.proj];
      item.module = s.layer->module;
      item.proj = kProj[s.proj];
      item.op = ExpertOp::mxfp4_to_nvfp4;
      item.source.format = Format::mxfp4;
      item.source.rows = rows;
      item.source.cols = cols;
      item.source.data = blocks.data + uint64_t(e) * packed_bytes;    // zero-copy: expert e's rows
      item.source.scales = scales.data + uint64_t(e) * scale_bytes;
      // gate and up are one matrix here (rows interleaved), so k_max over it is
      // ModelOpt's w1/w3 pairing: one weight_scale_2 for both.
      const ExponentRange range = mxfp4_matrix_exponent_range(item.source, item.base);
      item.params.k_max = range.max;
      item.all_in_window = range.max - range.min <= kMxfp4ToNvfp4Window;
      item.input_scale = input_scale;
      plan.experts.push_back({std::move(item), file_name(blocks.file), blocks.offset + uint64_t(e) * packed_bytes});
    }
    release_pages(scales.data, size_t(scales.nbytes));  // scanned: unmap, or the scan maps every scale
    for (const TensorInfo* part : t.parts) plan.consumed.insert(part->name);
    scan_done += scales.nbytes;
    if (progress.on_scan && scan_total > 0) progress.on_scan(scan_done, scan_total);
  }

  // ---- Per-expert NVFP4 -> stacked MXFP4: the E experts in a row --------------------
  for (const auto& [l, p] : to_mx) {
    const auto& set = l->per_expert[p];
    const DetectedTensor& first = *set.begin()->second;
    for (const auto& [e, t] : set) {
      ExpertItem item;
      item.base = t->name;
      item.module = l->module;
      item.proj = kProj[p];
      item.stacked = l->module + "." + kProj[p];
      item.op = ExpertOp::nvfp4_to_mxfp4;
      item.params.restore_cast_blocks = true;
      item.source.format = Format::nvfp4;
      item.source.rows = t->rows;
      item.source.cols = t->cols;
      item.source.data = t->parts[0]->data;
      item.source.scales = t->parts[1]->data;
      std::memcpy(&item.source.global_scale, t->parts[2]->data, 4);
      if (!(item.source.global_scale >= 0) || !std::isfinite(item.source.global_scale))
        fail(t->parts[2]->file, ": tensor ", t->parts[2]->name, " is ", item.source.global_scale,
             "; a weight_scale_2 must be finite and >= 0");
      if (t->cols % kMxfp4Block != 0)
        fail(t->parts[0]->file, ": tensor ", t->parts[0]->name, " has ", t->cols,
             " columns; MXFP4 blocks need a multiple of ", kMxfp4Block);
      for (const TensorInfo* part : t->parts) plan.consumed.insert(part->name);
      // The stacked output goes where its first expert was, in that one's place.
      plan.experts.push_back({std::move(item), file_name(first.parts[0]->file), first.parts[0]->offset});
    }
  }
  return plan;
}

}  // namespace nibble
