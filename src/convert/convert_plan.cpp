#include "convert/convert_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <nlohmann/json.hpp>

#include "convert/gpt_oss_plan.h"
#include "convert/source_pages.h"
#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

namespace fs = std::filesystem;

struct ExpertName {
  std::string module;  // "layers.3.ffn.experts"
  std::string prefix;  // "layers.3": where ffn_norm lives
  std::string expert;  // "layers.3.ffn.experts.7": the w1/w3 pair key
  std::string proj;    // "w1"
  bool mtp = false;
};

// Routed experts of the DeepSeek-V4 layout (dsv4.md §3); shared experts are
// FP8 and never match.
std::optional<ExpertName> parse_expert(const std::string& base) {
  static const std::regex re(R"(^(((layers|mtp)\.\d+)\.ffn\.experts)\.(\d+)\.(w[123])$)");
  std::smatch m;
  if (!std::regex_match(base, m, re)) return std::nullopt;
  ExpertName n;
  n.module = m[1];
  n.prefix = m[2];
  n.mtp = m[3] == "mtp";
  n.expert = n.module + "." + std::string(m[4]);
  n.proj = m[5];
  return n;
}

bool is_float(Format f) { return f == Format::bf16 || f == Format::f32; }
bool is_fp4(Format f) { return f == Format::mxfp4 || f == Format::nvfp4; }

// The conversion of one expert matrix, or nullopt to copy it unchanged.
std::optional<ExpertOp> choose_op(const DetectedTensor& t, Format target, bool mtp, MtpExperts policy) {
  if (t.format == target) return std::nullopt;
  if (mtp && policy == MtpExperts::keep) return std::nullopt;
  if (mtp && policy == MtpExperts::auto_ && is_fp4(t.format)) return std::nullopt;
  if (is_float(t.format)) return target == Format::nvfp4 ? ExpertOp::float_to_nvfp4 : ExpertOp::float_to_mxfp4;
  if (t.format == Format::mxfp4 && target == Format::nvfp4) return ExpertOp::mxfp4_to_nvfp4;
  if (t.format == Format::nvfp4 && target == Format::mxfp4) return ExpertOp::nvfp4_to_mxfp4;
  fail(t.parts[0]->file, ": tensor ", t.parts[0]->name, " is a routed expert in ", format_name(t.format),
       "; nibble convert turns mxfp4, nvfp4, bf16 and f32 experts into ", format_name(target));
}

ExpertSource source_view(const DetectedTensor& t) {
  ExpertSource s;
  s.format = t.format;
  s.rows = t.rows;
  s.cols = t.cols;
  s.data = t.parts[0]->data;
  if (t.format == Format::mxfp4 || t.format == Format::nvfp4) s.scales = t.parts[1]->data;
  if (t.format == Format::nvfp4) {
    std::memcpy(&s.global_scale, t.parts[2]->data, 4);
    if (!(s.global_scale >= 0) || !std::isfinite(s.global_scale))
      fail(t.parts[2]->file, ": tensor ", t.parts[2]->name, " is ", s.global_scale,
           "; a weight_scale_2 must be finite and >= 0");
  }
  return s;
}

double config_number(const Checkpoint& ck, const char* key, double fallback) {
  auto it = ck.config().find(key);
  return (it != ck.config().end() && it->is_number()) ? it->get<double>() : fallback;
}

// input_scale for a converted expert (docs/convert.md, "input_scale"). It
// matters only to W4A4 kernels, which quantize activations with global scale
// 1 / input_scale; ModelOpt writes a calibrated activation amax / 2688, which
// a conversion cannot know. nibble writes a data-free upper bound on the
// activation instead, so that such kernels never saturate:
//  - w1, w3 read ffn_norm(x) = x / rms(x) * gamma, and |x_i| / rms(x) <= sqrt(n),
//    so |input| <= sqrt(hidden) * max|gamma|;
//  - w2 reads silu(min(g, L)) * clamp(u, -L, L), times the routing weight when
//    applied first (DeepSeek's reference), which is at most
//    routed_scaling_factor: |input| <= max(1, rsf) * L * silu(L).
float input_scale_for(const Checkpoint& ck, const ExpertName& n, int64_t cols, std::vector<std::string>* warnings,
                      std::map<std::string, float>* cache) {
  const std::string key = n.prefix + "." + (n.proj == "w2" ? "w2" : "w13");
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  double bound;
  if (n.proj == "w2") {
    double limit = config_number(ck, "swiglu_limit", 10.0);  // HF's default
    if (!(limit > 0)) {
      warnings->push_back("config.json swiglu_limit is " + std::to_string(limit) +
                          ": no clamp bounds the w2 input; input_scale assumes a limit of 10");
      limit = 10.0;
    }
    const double rsf = std::max(1.0, config_number(ck, "routed_scaling_factor", 1.0));
    bound = rsf * limit * (limit / (1.0 + std::exp(-limit)));
  } else {
    auto g = vector_amax(ck, n.prefix + ".ffn_norm.weight");
    if (!g) {
      warnings->push_back(n.prefix + ".ffn_norm.weight is missing or not BF16/F32: the input_scale of " +
                          n.module + ".*.w1/w3 assumes max|gamma| = 1");
      g = 1.0f;
    }
    bound = std::sqrt(double(cols)) * double(*g);
  }
  float s = float(bound) / 2688.0f;
  (*cache)[key] = s;
  return s;
}

struct Unit {
  int align = 1;           // element size of the unit's tensors: larger first keeps every tensor aligned
  uint64_t order = 0;      // source offset: output follows the source file where it can
  std::string name;
  std::vector<OutputTensor> tensors;
};

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

}  // namespace

std::optional<float> vector_amax(const Checkpoint& ck, const std::string& name) {
  const TensorInfo* g = ck.find(name);
  if (!g || (g->dtype != DType::BF16 && g->dtype != DType::F32)) return std::nullopt;
  float m = 0;
  for (int64_t i = 0; i < g->numel(); ++i) {
    float v;
    if (g->dtype == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, g->data + 2 * i, 2);
      v = bf16_decode(h);
    } else {
      std::memcpy(&v, g->data + 4 * i, 4);
    }
    if (!std::isfinite(v)) fail(g->file, ": tensor ", g->name, " element ", i, " is ", v);
    m = std::max(m, std::fabs(v));
  }
  return m;
}

namespace {

// DeepSeek-V4's routed experts (layers.N.ffn.experts.M.w1/w2/w3): each
// matrix its own tensors, w1/w3 of an expert sharing weight_scale_2.
PlannedExperts plan_dsv4_experts(const Checkpoint& ck, const Detection& det, Format target, MtpExperts mtp,
                                 const PlanProgress& progress, bool* has_fp8_block) {
  PlannedExperts plan;
  // ---- Which expert matrices change ----------------------------------------
  struct Pending {
    const DetectedTensor* t;
    ExpertName name;
    ExpertOp op;
  };
  std::vector<Pending> pending;
  for (const auto& t : det.tensors) {
    if (t.format == Format::fp8_block128) *has_fp8_block = true;
    if (!t.is_matrix || !t.unsupported.empty()) continue;
    auto name = parse_expert(t.name);
    if (!name) continue;
    auto op = choose_op(t, target, name->mtp, mtp);
    plan.module_formats[name->module].insert(op ? target : t.format);
    if (!op) {
      ++plan.kept;
      if (name->mtp) ++plan.mtp_kept;
      continue;
    }
    if (t.cols % kMxfp4Block != 0)
      fail(t.parts[0]->file, ": tensor ", t.parts[0]->name, " has ", t.cols, " columns; FP4 blocks need a multiple of ",
           kMxfp4Block);
    pending.push_back({&t, *name, *op});
  }

  // ---- Scan: the scales that depend on the whole tensor or w1/w3 pair --------
  uint64_t scan_total = 0, scan_done = 0;
  for (const auto& p : pending) {
    if (p.op == ExpertOp::mxfp4_to_nvfp4) scan_total += p.t->parts[1]->nbytes;
    if (p.op == ExpertOp::float_to_nvfp4) scan_total += p.t->parts[0]->nbytes;
  }
  std::map<std::string, float> pair_amax;  // expert -> max over w1, w3 (NVFP4 from float)
  std::map<std::string, int> pair_kmax;    // expert -> max block exponent over w1, w3
  std::vector<float> own(pending.size());  // per matrix: amax or k_max
  std::vector<int> own_kmin(pending.size(), 0);  // per MXFP4 matrix: the smallest block exponent
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    check_cancel(progress.cancel);
    ExpertSource src = source_view(*p.t);
    const bool paired = p.name.proj != "w2";
    if (p.op == ExpertOp::mxfp4_to_nvfp4) {
      const ExponentRange range = mxfp4_matrix_exponent_range(src, p.t->name);  // also rejects NaN scale codes
      const int k = range.max;
      own[i] = float(k);
      own_kmin[i] = range.min;
      release_pages(src.scales, size_t(p.t->parts[1]->nbytes));  // scanned: unmap, or the scan maps every scale
      if (paired) {
        auto [it, fresh] = pair_kmax.emplace(p.name.expert, k);
        if (!fresh) it->second = std::max(it->second, k);
      }
      scan_done += p.t->parts[1]->nbytes;
    } else if (p.op == ExpertOp::float_to_nvfp4) {
      float a = float_matrix_amax(src, p.t->parts[0]->name);
      release_pages(src.data, size_t(p.t->parts[0]->nbytes));  // scanned: unmap, or the scan maps every expert
      own[i] = a;
      if (paired) {
        auto [it, fresh] = pair_amax.emplace(p.name.expert, a);
        if (!fresh) it->second = std::max(it->second, a);
      }
      scan_done += p.t->parts[0]->nbytes;
    }
    if (progress.on_scan && scan_total > 0) progress.on_scan(scan_done, scan_total);
  }

  std::map<std::string, float> input_cache;
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    ExpertItem e;
    e.base = p.t->name;
    e.module = p.name.module;
    e.proj = p.name.proj;
    e.mtp = p.name.mtp;
    e.source = source_view(*p.t);
    e.op = p.op;
    const bool paired = e.proj != "w2";
    if (p.op == ExpertOp::mxfp4_to_nvfp4) {
      e.params.k_max = paired ? pair_kmax.at(p.name.expert) : int(own[i]);
      e.all_in_window = e.params.k_max - own_kmin[i] <= kMxfp4ToNvfp4Window;
    } else if (p.op == ExpertOp::float_to_nvfp4) {
      e.params.global_scale = nvfp4_global_scale(paired ? pair_amax.at(p.name.expert) : own[i]);
    }
    if (target == Format::nvfp4)
      e.input_scale = input_scale_for(ck, p.name, e.source.cols, &plan.warnings, &input_cache);
    for (const TensorInfo* part : p.t->parts) plan.consumed.insert(part->name);
    const TensorInfo* w = p.t->parts[0];
    plan.experts.push_back({std::move(e), file_name(w->file), w->offset});
  }
  return plan;
}

}  // namespace

ConvertPlan make_convert_plan(const Checkpoint& ck, const Detection& det, Format target, MtpExperts mtp,
                              const PlanProgress& progress) {
  if (target != Format::nvfp4 && target != Format::mxfp4)
    fail("nibble convert writes nvfp4 or mxfp4 experts, not ", format_name(target));
  ConvertPlan plan;
  plan.target = target;
  plan.source_bytes = ck.total_bytes();
  plan.layout = is_gpt_oss(ck) ? ExpertLayout::gpt_oss : ExpertLayout::dsv4;
  PlannedExperts found = plan.layout == ExpertLayout::gpt_oss
                             ? plan_gpt_oss_experts(ck, det, target, progress)
                             : plan_dsv4_experts(ck, det, target, mtp, progress, &plan.has_fp8_block);
  plan.experts_kept = found.kept;
  plan.mtp_experts_kept = found.mtp_kept;
  plan.module_formats = std::move(found.module_formats);
  plan.warnings = std::move(found.warnings);
  for (auto& p : found.experts) plan.experts.push_back(p.item);


  // ---- Output shards ---------------------------------------------------------
  const std::set<std::string>& consumed = found.consumed;
  std::map<std::string, std::vector<Unit>> units;  // output file -> units
  for (size_t i = 0; i < found.experts.size();) {
    const ExpertItem& e = plan.experts[i];
    const int64_t rows = e.source.rows, cols = e.source.cols;
    auto& list = units[found.experts[i].file];
    Unit data;
    data.order = found.experts[i].order;
    OutputTensor wt, st;
    wt.kind = OutputTensor::Kind::expert_weight;
    st.kind = OutputTensor::Kind::expert_scale;
    wt.expert = st.expert = int(i);
    if (!e.stacked.empty()) {
      // gpt-oss's stacked MXFP4 tensors: the experts that follow with the
      // same stacked name, in a row ([E, rows, cols/32, 16] and [E, rows, cols/32]).
      size_t n = 1;
      while (i + n < found.experts.size() && plan.experts[i + n].stacked == e.stacked) {
        const ExpertSource& o = plan.experts[i + n].source;
        if (o.rows != rows || o.cols != cols)
          fail("tensor ", plan.experts[i + n].base, " holds [", o.rows, ", ", o.cols, "] but ", e.base, " [", rows,
               ", ", cols, "]: the experts of ", e.stacked, " must have one shape");
        ++n;
      }
      const int64_t E = int64_t(n);
      data.name = e.stacked;
      wt.expert_count = st.expert_count = int(n);
      wt.spec = {e.stacked + "_blocks", DType::U8, {E, rows, cols / kMxfp4Block, kMxfp4Block / 2}};
      st.spec = {e.stacked + "_scales", DType::U8, {E, rows, cols / kMxfp4Block}};
      data.tensors = {wt, st};
      list.push_back(std::move(data));
      i += n;
      continue;
    }
    data.name = e.base;
    if (target == Format::nvfp4) {
      wt.spec = {e.base + ".weight", DType::U8, {rows, cols / 2}};
      st.spec = {e.base + ".weight_scale", DType::F8_E4M3, {rows, cols / kNvfp4Block}};
    } else {
      wt.spec = {e.base + ".weight", DType::I8, {rows, cols / 2}};
      st.spec = {e.base + ".scale", DType::F8_E8M0, {rows, cols / kMxfp4Block}};
    }
    data.tensors = {wt, st};
    list.push_back(std::move(data));
    if (target == Format::nvfp4) {
      const float s_g = e.op == ExpertOp::mxfp4_to_nvfp4 ? mxfp4_to_nvfp4_global_scale(e.params.k_max)
                                                        : e.params.global_scale;
      for (auto [suffix, value] : {std::pair<const char*, float>{".weight_scale_2", s_g}, {".input_scale", e.input_scale}}) {
        Unit u;
        u.align = 4;
        u.order = found.experts[i].order;
        u.name = e.base + suffix;
        OutputTensor s;
        s.kind = OutputTensor::Kind::scalar;
        s.spec = {u.name, DType::F32, {}};
        s.value = value;
        u.tensors = {s};
        list.push_back(std::move(u));
      }
    }
    ++i;
  }
  for (const TensorInfo* t : ck.tensors()) {
    if (consumed.count(t->name)) continue;
    Unit u;
    u.align = int(dtype_size(t->dtype));
    u.order = t->offset;
    u.name = t->name;
    OutputTensor c;
    c.kind = OutputTensor::Kind::copy;
    c.spec = {t->name, t->dtype, t->shape};
    c.src = t;
    u.tensors = {c};
    units[file_name(t->file)].push_back(std::move(u));
  }
  for (const auto& shard : ck.shards()) {
    ShardPlan sp;
    sp.file = file_name(shard->path());
    sp.metadata = shard->metadata();
    auto& list = units[sp.file];
    if (list.empty()) continue;  // every tensor moved out (not seen in practice)
    std::sort(list.begin(), list.end(), [](const Unit& a, const Unit& b) {
      if (a.align != b.align) return a.align > b.align;
      if (a.order != b.order) return a.order < b.order;
      return a.name < b.name;
    });
    for (auto& u : list)
      for (auto& t : u.tensors) {
        sp.data_bytes += t.spec.nbytes();
        sp.tensors.push_back(std::move(t));
      }
    plan.shards.push_back(std::move(sp));
  }
  return plan;
}

}  // namespace nibble
