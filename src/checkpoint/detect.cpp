#include "checkpoint/detect.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_expert_weight(const std::string& base) {
  return base.find(".experts.") != std::string::npos && base.find("shared_experts") == std::string::npos;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string json_str(const json& j, const char* key) {
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : "";
}

std::optional<Format> algo_format(const std::string& algo) {
  std::string a = lower(algo);
  if (a == "nvfp4") return Format::nvfp4;
  if (a == "mxfp4") return Format::mxfp4;
  if (a == "fp8" || a == "fp8_block" || a == "fp8_pb_wo") return Format::fp8_block128;
  return std::nullopt;
}

// What the metadata files say, parsed once.
struct Metadata {
  // hf_quant_config.json (ModelOpt)
  bool modelopt = false;
  std::string modelopt_algo;                 // "MIXED_PRECISION", "NVFP4", "" (null)
  // quantized_layers: module -> algo. Hashed: the early schema lists every
  // expert matrix (~33,000 keys for DeepSeek-V4-Flash), and each of ~35,000
  // weights looks up itself and its parents.
  std::unordered_map<std::string, std::string> layers;
  // exclude_modules, split so that a weight costs one hash lookup per literal
  // (the early schema names ~1,100 modules one by one) plus one fnmatch per
  // real glob (the current schema has a handful).
  std::unordered_set<std::string> exclude_names;  // entries without * ? [
  std::vector<std::string> exclude_globs;
  // config.json
  std::string quant_method;                  // quantization_config.quant_method
  std::string moe_quant_algo;                // quantization_config.moe_quant_algo
  std::string expert_dtype;                  // top-level expert_dtype (DeepSeek-V4)
  std::string fp8_desc;                      // "quant_method fp8, weight_block_size [128,128], scale_fmt ue8m0"
  // compressed-tensors pack-quantized INT4 (W4A16): the config groups' group_size.
  int64_t ct_group = 0;
  std::string ct_desc;                       // "compressed-tensors pack-quantized: int4 symmetric, group_size 32"
  // gpt-oss's quantization_config {quant_method mxfp4, modules_to_not_convert}:
  // *_blocks / *_scales MXFP4 tensors everywhere but the listed modules.
  std::string mxfp4_desc;                    // "config.json quantization_config (quant_method mxfp4, ...)"
  std::vector<std::string> not_convert;      // modules_to_not_convert (fnmatch globs)
  std::vector<Unsupported> unsupported;
  std::string schema;
};

std::string schema_of_modelopt(const Metadata& m) {
  if (m.modelopt_algo == "MIXED_PRECISION") return "ModelOpt current schema (quant_algo MIXED_PRECISION + quantized_layers)";
  if (m.modelopt_algo.empty()) return "ModelOpt early schema (quant_algo null, per-module keys)";
  return "ModelOpt (quant_algo " + m.modelopt_algo + ")";
}

// compressed-tensors' quantization_config: nibble runs the `pack-quantized`
// format with weight-only symmetric INT4 groups (Kimi K2's W4A16); any other
// scheme is recorded as unsupported, naming the field.
void read_compressed_tensors(const json& qc, const std::string& cfg_path, Metadata& m) {
  const std::string fmt = json_str(qc, "format");
  const std::string where = cfg_path + " quantization_config";
  if (fmt != "pack-quantized") {
    m.unsupported.push_back({"compressed-tensors" + (fmt.empty() ? "" : " (" + fmt + ")"), where + ".format", ""});
    return;
  }
  auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->empty()) {
    m.unsupported.push_back({"compressed-tensors pack-quantized without config_groups", where, ""});
    return;
  }
  for (auto g = groups->begin(); g != groups->end(); ++g) {
    const std::string at = where + ".config_groups." + g.key();
    if (!g->is_object()) {
      m.unsupported.push_back({"compressed-tensors config group that is not an object", at, ""});
      continue;
    }
    if (auto in = g->find("input_activations"); in != g->end() && !in->is_null()) {
      m.unsupported.push_back({"compressed-tensors quantized activations (nibble runs weight-only INT4)",
                               at + ".input_activations", ""});
      continue;
    }
    auto w = g->find("weights");
    if (w == g->end() || !w->is_object()) {
      m.unsupported.push_back({"compressed-tensors config group without weights", at, ""});
      continue;
    }
    auto num = [&](const char* k) { return w->contains(k) && (*w)[k].is_number_integer() ? (*w)[k].get<int64_t>() : -1; };
    const int64_t bits = num("num_bits"), group = num("group_size");
    const bool symmetric = w->contains("symmetric") && (*w)["symmetric"].is_boolean() && (*w)["symmetric"].get<bool>();
    const std::string type = json_str(*w, "type"), strategy = json_str(*w, "strategy");
    std::string scheme = "num_bits " + std::to_string(bits) + ", type " + (type.empty() ? "?" : type) + ", " +
                         (symmetric ? "symmetric" : "asymmetric") + ", strategy " +
                         (strategy.empty() ? "?" : strategy) + ", group_size " + std::to_string(group);
    if (bits != 4 || type != "int" || !symmetric || strategy != "group" || group <= 0 || group % 8 != 0) {
      m.unsupported.push_back({"compressed-tensors weights (" + scheme + "); nibble runs int4 symmetric groups",
                               at + ".weights", ""});
      continue;
    }
    if (m.ct_group != 0 && m.ct_group != group) {
      m.unsupported.push_back({"compressed-tensors groups of different group_size (" + std::to_string(m.ct_group) +
                                   " and " + std::to_string(group) + ")",
                               at + ".weights.group_size", ""});
      continue;
    }
    m.ct_group = group;
    m.ct_desc = "config.json quantization_config (compressed-tensors pack-quantized: " + scheme + ")";
  }
}

Metadata read_metadata(const Checkpoint& ck) {
  Metadata m;
  const std::string cfg_path = ck.file_path("config.json");
  if (const json* hq = ck.hf_quant_config()) {
    const std::string path = ck.file_path("hf_quant_config.json");
    if (!hq->is_object()) fail(path, ": not a JSON object");
    auto q = hq->find("quantization");
    const json& quant = (q != hq->end() && q->is_object()) ? *q : *hq;
    m.modelopt = true;
    m.modelopt_algo = json_str(quant, "quant_algo");
    auto add_layers = [&](const json& obj) {
      for (auto it = obj.begin(); it != obj.end(); ++it)
        if (it->is_object() && it->contains("quant_algo") && (*it)["quant_algo"].is_string())
          m.layers[it.key()] = (*it)["quant_algo"].get<std::string>();
    };
    if (auto ql = quant.find("quantized_layers"); ql != quant.end() && ql->is_object()) add_layers(*ql);
    if (m.modelopt_algo.empty()) add_layers(quant);  // early schema may inline per-module keys
    if (auto ex = quant.find("exclude_modules"); ex != quant.end() && ex->is_array())
      for (const auto& e : *ex) {
        if (!e.is_string()) continue;
        std::string pat = e.get<std::string>();
        if (pat.find_first_of("*?[") == std::string::npos) m.exclude_names.insert(std::move(pat));
        else m.exclude_globs.push_back(std::move(pat));
      }
    std::string algo_u = lower(m.modelopt_algo);
    if (!m.modelopt_algo.empty() && algo_u != "mixed_precision" && !algo_format(m.modelopt_algo))
      m.unsupported.push_back({"ModelOpt quant_algo " + m.modelopt_algo, path + " quantization.quant_algo", ""});
    std::vector<const std::string*> bad;  // in name order, as the report lists them
    for (const auto& [module, algo] : m.layers)
      if (!algo_format(algo)) bad.push_back(&module);
    std::sort(bad.begin(), bad.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
    for (const std::string* module : bad)
      m.unsupported.push_back({"ModelOpt quant_algo " + m.layers.at(*module), path + " quantized_layers", *module});
  }
  const json& cfg = ck.config();
  m.expert_dtype = json_str(cfg, "expert_dtype");
  if (auto qc = cfg.find("quantization_config"); qc != cfg.end() && qc->is_object()) {
    m.quant_method = lower(json_str(*qc, "quant_method"));
    m.moe_quant_algo = json_str(*qc, "moe_quant_algo");
    if (m.quant_method == "fp8") {
      m.fp8_desc = "config.json quantization_config (quant_method fp8";
      if (auto bs = qc->find("weight_block_size"); bs != qc->end()) m.fp8_desc += ", weight_block_size " + bs->dump();
      if (auto sf = json_str(*qc, "scale_fmt"); !sf.empty()) m.fp8_desc += ", scale_fmt " + sf;
      m.fp8_desc += ")";
      if (auto bs = qc->find("weight_block_size");
          bs != qc->end() && *bs != json::array({128, 128}))
        m.unsupported.push_back({"fp8 with weight_block_size " + bs->dump(),
                                 cfg_path + " quantization_config.weight_block_size", ""});
    } else if (m.quant_method == "compressed-tensors") {
      read_compressed_tensors(*qc, cfg_path, m);
    } else if (m.quant_method == "modelopt") {
      std::string algo = json_str(*qc, "quant_algo");
      if (!algo_format(algo) && lower(algo) != "mixed_precision")
        m.unsupported.push_back({"modelopt " + algo, cfg_path + " quantization_config.quant_algo", ""});
    } else if (m.quant_method == "mxfp4") {
      m.mxfp4_desc = "config.json quantization_config (quant_method mxfp4";
      if (auto nc = qc->find("modules_to_not_convert"); nc != qc->end() && !nc->is_null()) {
        if (!nc->is_array()) fail(cfg_path, ": quantization_config.modules_to_not_convert must be a list of module names");
        for (const auto& e : *nc) {
          if (!e.is_string()) fail(cfg_path, ": quantization_config.modules_to_not_convert must be a list of module names");
          m.not_convert.push_back(e.get<std::string>());
        }
        m.mxfp4_desc += ", modules_to_not_convert " + nc->dump();
      }
      m.mxfp4_desc += ")";
    } else if (!m.quant_method.empty()) {
      m.unsupported.push_back({m.quant_method, cfg_path + " quantization_config.quant_method", ""});
    }
    if (!m.moe_quant_algo.empty() && !algo_format(m.moe_quant_algo))
      m.unsupported.push_back({"moe_quant_algo " + m.moe_quant_algo,
                               cfg_path + " quantization_config.moe_quant_algo", ""});
  }
  if (!m.expert_dtype.empty() && m.expert_dtype != "fp4" && m.expert_dtype != "fp8" &&
      m.expert_dtype != "bf16")
    m.unsupported.push_back({"expert_dtype " + m.expert_dtype, cfg_path + " expert_dtype", ""});

  if (m.modelopt) m.schema = schema_of_modelopt(m);
  else if (m.quant_method == "fp8" && !m.expert_dtype.empty())
    m.schema = "DeepSeek-V4 (fp8 quantization_config + expert_dtype " + m.expert_dtype + ")";
  else if (m.quant_method == "mxfp4")
    m.schema = "gpt-oss (quantization_config quant_method mxfp4 + modules_to_not_convert; *_blocks / *_scales)";
  else if (!m.quant_method.empty()) m.schema = "quantization_config quant_method " + m.quant_method;
  else if (!std::filesystem::exists(cfg_path))
    m.schema = "none (no config.json; the formats come from the tensors alone)";
  else m.schema = "none in config.json (the formats come from the tensors alone)";
  return m;
}

// Whether exclude_modules names `base` or `base.weight` (a literal matches
// only itself, as fnmatch would match it).
bool excluded(const Metadata& m, const std::string& base) {
  const std::string w = base + ".weight";
  if (m.exclude_names.count(base) || m.exclude_names.count(w)) return true;
  for (const auto& pat : m.exclude_globs)
    if (fnmatch(pat.c_str(), base.c_str(), 0) == 0 || fnmatch(pat.c_str(), w.c_str(), 0) == 0) return true;
  return false;
}

// The longest quantized_layers key that is `base` itself or a parent module
// of it ("layers.3.ffn.experts" for "layers.3.ffn.experts.7.w1"): one hash
// lookup per dot in the name, longest first.
const std::pair<const std::string, std::string>* quantized_layer(const Metadata& m, const std::string& base) {
  for (size_t end = base.size(); end != std::string::npos && end > 0; end = base.rfind('.', end - 1)) {
    auto it = m.layers.find(base.substr(0, end));
    if (it != m.layers.end()) return &*it;
  }
  return nullptr;
}

struct Expectation {
  std::optional<Format> format;
  std::string provenance;
};

// What the metadata says a weight matrix stored in `stored` (its dtype class)
// should be.
Expectation expected(const Metadata& m, const std::string& base, bool fp8_stored, bool is_matrix) {
  const bool expert = is_expert_weight(base);
  if (m.modelopt && !excluded(m, base)) {
    const std::string src = "hf_quant_config.json, " + schema_of_modelopt(m);
    if (const auto* layer = quantized_layer(m, base))
      return {algo_format(layer->second),
              src + ": quantized_layers[\"" + layer->first + "\"] = " + layer->second};
    // A blanket quant_algo covers the linear layers: ModelOpt quantizes no
    // norm (gpt-oss's NVFP4 exports name only the modules they exclude).
    if (auto f = algo_format(m.modelopt_algo); f && is_matrix) return {f, src + ": quant_algo " + m.modelopt_algo};
  }
  // ModelOpt's moe_quant_algo covers what hf_quant_config.json quantized:
  // a module it excludes (NVIDIA's release keeps mtp.* in MXFP4) falls through.
  if (expert && !m.moe_quant_algo.empty() && !(m.modelopt && excluded(m, base)))
    return {algo_format(m.moe_quant_algo), "config.json quantization_config.moe_quant_algo " + m.moe_quant_algo};
  if (expert && !m.expert_dtype.empty()) {
    std::optional<Format> f;
    if (m.expert_dtype == "fp4") f = Format::mxfp4;
    else if (m.expert_dtype == "fp8") f = Format::fp8_block128;
    else if (m.expert_dtype == "bf16") f = Format::bf16;
    return {f, "config.json expert_dtype \"" + m.expert_dtype + "\" (outside quantization_config)"};
  }
  if (m.quant_method == "fp8" && fp8_stored) return {Format::fp8_block128, m.fp8_desc};
  return {};
}

const TensorInfo* sibling(const Checkpoint& ck, const std::string& base, const char* suffix) {
  return ck.find(base + suffix);
}

void check_shape(const TensorInfo& t, std::vector<int64_t> want, const std::string& what) {
  if (t.shape != want) {
    TensorInfo w;
    w.shape = want;
    fail(t.file, ": tensor ", t.name, " has shape ", t.shape_str(), " but ", what, " needs ", w.shape_str());
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Classifies weight `base` from its stored tensors (rule 3 of checkpoints.md).
// Returns false when the tensors form no format nibble knows.
bool classify_weight(const Checkpoint& ck, const std::string& base, const TensorInfo& w,
                     DetectedTensor* out, std::string* evidence) {
  out->parts = {&w};
  const TensorInfo* scale = sibling(ck, base, ".scale");
  const TensorInfo* ws = sibling(ck, base, ".weight_scale");
  const TensorInfo* ws2 = sibling(ck, base, ".weight_scale_2");
  const TensorInfo* wsi = sibling(ck, base, ".weight_scale_inv");
  const TensorInfo* in_scale = sibling(ck, base, ".input_scale");
  if (w.shape.size() != 2) {
    if (w.dtype == DType::BF16 || w.dtype == DType::F32) {
      out->format = w.dtype == DType::BF16 ? Format::bf16 : Format::f32;
      *evidence = std::string("dtype ") + dtype_name(w.dtype);
      return true;
    }
    return false;
  }
  const int64_t rows = w.shape[0];
  if ((w.dtype == DType::I8 || w.dtype == DType::U8) && scale && scale->dtype == DType::F8_E8M0) {
    const int64_t cols = w.shape[1] * 2;
    check_shape(*scale, {rows, ceil_div(cols, 32)}, "MXFP4 weight " + base + " " + w.shape_str());
    out->format = Format::mxfp4;
    out->parts.push_back(scale);
    out->is_matrix = true;
    out->rows = rows;
    out->cols = cols;
    *evidence = std::string(dtype_name(w.dtype)) + " packed FP4 + F8_E8M0 .scale per 32";
    return true;
  }
  if ((w.dtype == DType::U8 || w.dtype == DType::I8) && ws && ws->dtype == DType::F8_E4M3 && ws2 &&
      ws2->dtype == DType::F32) {
    const int64_t cols = w.shape[1] * 2;
    check_shape(*ws, {rows, ceil_div(cols, 16)}, "NVFP4 weight " + base + " " + w.shape_str());
    if (ws2->numel() != 1) fail(ws2->file, ": tensor ", ws2->name, " must be a scalar, has shape ", ws2->shape_str());
    out->format = Format::nvfp4;
    out->parts.push_back(ws);
    out->parts.push_back(ws2);
    if (in_scale) out->parts.push_back(in_scale);
    out->is_matrix = true;
    out->rows = rows;
    out->cols = cols;
    *evidence = std::string(dtype_name(w.dtype)) + " packed FP4 + F8_E4M3 .weight_scale per 16 + F32 .weight_scale_2";
    return true;
  }
  if (w.dtype == DType::F8_E4M3) {
    const TensorInfo* s = scale ? scale : wsi;
    if (!s || (s->dtype != DType::F8_E8M0 && s->dtype != DType::F32)) return false;
    const int64_t cols = w.shape[1];
    if (s->shape.size() != 2) return false;  // a scalar scale is per-tensor FP8, not block-128
    check_shape(*s, {ceil_div(rows, 128), ceil_div(cols, 128)}, "FP8 block-128 weight " + base + " " + w.shape_str());
    out->format = Format::fp8_block128;
    out->parts.push_back(s);
    out->is_matrix = true;
    out->rows = rows;
    out->cols = cols;
    *evidence = std::string("F8_E4M3 + ") + dtype_name(s->dtype) + " " + (scale ? ".scale" : ".weight_scale_inv") +
                " per 128x128 tile";
    return true;
  }
  if (w.dtype == DType::BF16 || w.dtype == DType::F32) {
    out->format = w.dtype == DType::BF16 ? Format::bf16 : Format::f32;
    out->is_matrix = true;
    out->rows = rows;
    out->cols = w.shape[1];
    *evidence = std::string("dtype ") + dtype_name(w.dtype);
    return true;
  }
  return false;
}

// A compressed-tensors pack-quantized weight (format/int4.h): I32
// .weight_packed [rows, cols/8], BF16 .weight_scale [rows, cols/group] and
// .weight_shape = [rows, cols]. False for a layout nibble cannot run
// (an asymmetric .weight_zero_point, scales of another dtype); shapes that
// contradict each other are errors naming the tensors.
bool classify_int4(const Checkpoint& ck, const std::string& base, const TensorInfo& packed, DetectedTensor* out,
                   std::string* evidence) {
  const TensorInfo* scale = sibling(ck, base, ".weight_scale");
  const TensorInfo* shape = sibling(ck, base, ".weight_shape");
  if (packed.dtype != DType::I32 || packed.shape.size() != 2 || !scale || scale->dtype != DType::BF16 ||
      scale->shape.size() != 2 || sibling(ck, base, ".weight_zero_point"))
    return false;
  if (!shape) fail(packed.file, ": tensor ", packed.name, " has no ", base, ".weight_shape (compressed-tensors stores the logical shape there)");
  const int64_t rows = packed.shape[0], cols = packed.shape[1] * 8;
  if (shape->numel() != 2 || (shape->dtype != DType::I64 && shape->dtype != DType::I32))
    fail(shape->file, ": tensor ", shape->name, " must hold 2 integers (I64 or I32), has ", dtype_name(shape->dtype), " ",
         shape->shape_str());
  if (shape->data) {
    int64_t logical[2];
    for (int i = 0; i < 2; ++i) {
      if (shape->dtype == DType::I64) std::memcpy(&logical[i], shape->data + 8 * i, 8);
      else {
        int32_t v;
        std::memcpy(&v, shape->data + 4 * i, 4);
        logical[i] = v;
      }
    }
    if (logical[0] != rows || logical[1] != cols)
      fail(shape->file, ": tensor ", shape->name, " says [", logical[0], ", ", logical[1], "] but ", packed.name, " ",
           packed.shape_str(), " holds [", rows, ", ", cols,
           "] (nibble needs in-features that are a multiple of 8: no padded words)");
  }
  if (scale->shape[0] != rows || scale->shape[1] <= 0 || cols % scale->shape[1] != 0 || (cols / scale->shape[1]) % 8 != 0)
    fail(scale->file, ": tensor ", scale->name, " has shape ", scale->shape_str(), " which is not one scale per group of a ",
         "multiple of 8 elements for ", packed.name, " [", rows, ", ", cols, "]");
  const int64_t group = cols / scale->shape[1];
  out->format = Format::int4;
  out->parts = {&packed, scale, shape};
  out->is_matrix = true;
  out->rows = rows;
  out->cols = cols;
  *evidence = "I32 .weight_packed + BF16 .weight_scale per " + std::to_string(group) + " + .weight_shape";
  return true;
}

// Whether modules_to_not_convert names module `base` or a parent of it (its
// entries are globs: "model.layers.*.self_attn").
bool not_converted(const Metadata& m, const std::string& base) {
  for (const auto& pat : m.not_convert)
    for (size_t end = base.size(); end != std::string::npos && end > 0; end = base.rfind('.', end - 1))
      if (fnmatch(pat.c_str(), base.substr(0, end).c_str(), 0) == 0) return true;
  return false;
}

// gpt-oss's MXFP4 layout (transformers' integrations/mxfp4.py): `base`_blocks
// U8 [..., R, C/32, 16] (16 bytes = 32 E2M1 codes, element 2j in the low
// nibble of byte j) and `base`_scales U8 [..., R, C/32] (E8M0 exponents,
// 2^(s - 127)). The leading dimensions (gpt-oss: the experts) stack R x C
// matrices [out, in] back to back, so the whole tensor is one MXFP4 matrix
// of [prod(leading) * R, C] in nibble's own layout, read in place.
void classify_blocks(const Checkpoint& ck, const std::string& base, const TensorInfo& blocks, DetectedTensor* out,
                     std::string* evidence) {
  const TensorInfo* scales = ck.find(base + "_scales");
  if (!scales)
    fail(blocks.file, ": tensor ", blocks.name, " (MXFP4 blocks) has no ", base, "_scales (its E8M0 exponents)");
  if (blocks.dtype != DType::U8)
    fail(blocks.file, ": tensor ", blocks.name, " has dtype ", dtype_name(blocks.dtype), "; MXFP4 blocks are U8");
  if (scales->dtype != DType::U8 && scales->dtype != DType::F8_E8M0)
    fail(scales->file, ": tensor ", scales->name, " has dtype ", dtype_name(scales->dtype),
         "; MXFP4 scales are U8 (E8M0)");
  if (blocks.shape.size() < 3 || blocks.shape.back() != 16)
    fail(blocks.file, ": tensor ", blocks.name, " has shape ", blocks.shape_str(),
         " but MXFP4 blocks are [..., rows, cols/32, 16]");
  std::vector<int64_t> want(blocks.shape.begin(), blocks.shape.end() - 1);
  check_shape(*scales, want, "MXFP4 blocks " + blocks.name + " " + blocks.shape_str());
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < blocks.shape.size(); ++i) rows *= blocks.shape[i];
  out->format = Format::mxfp4;
  out->parts = {&blocks, scales};
  out->is_matrix = true;
  out->rows = rows;
  out->cols = blocks.shape[blocks.shape.size() - 2] * 32;
  // No shape in the evidence: explain folds one line for every layer's tensors.
  *evidence = "U8 _blocks (32 E2M1 per 16 bytes, " + std::to_string(blocks.shape.size() - 3) +
              " leading (expert) dims) + " + dtype_name(scales->dtype) + " _scales (E8M0) per 32";
}

// Names that mark quantization layouts nibble recognises but cannot run.
std::optional<std::string> unsupported_by_name(const std::string& name) {
  if (ends_with(name, ".qweight") || ends_with(name, ".qzeros") || ends_with(name, ".g_idx"))
    return "gptq/awq packed int4";
  return std::nullopt;
}

uint64_t parts_bytes(const DetectedTensor& t) {
  uint64_t b = 0;
  for (const auto* p : t.parts) b += p->nbytes;
  return b;
}

}  // namespace

Detection detect_formats(const Checkpoint& ck) {
  Detection det;
  Metadata meta = read_metadata(ck);
  det.metadata_schema = meta.schema;
  det.unsupported = meta.unsupported;

  std::set<std::string> consumed;
  // A tensor found by passes 1-1c: its parts are taken, pass 2 skips them.
  auto keep = [&](DetectedTensor d) {
    d.bytes = parts_bytes(d);
    for (const auto* p : d.parts) consumed.insert(p->name);
    det.tensors.push_back(std::move(d));
  };
  // Pass 1: weights and their scale siblings.
  for (const TensorInfo* t : ck.tensors()) {
    if (!ends_with(t->name, ".weight")) continue;
    const std::string base = t->name.substr(0, t->name.size() - 7);
    DetectedTensor d;
    d.name = base;
    std::string evidence;
    if (!classify_weight(ck, base, *t, &d, &evidence)) {
      d.parts = {t};
      d.format = Format::int_index;
      d.provenance = std::string("unsupported storage: ") + dtype_name(t->dtype) + " " + t->shape_str() +
                     " without the scale tensors of a known format";
      d.unsupported = std::string(dtype_name(t->dtype)) + " weight without known scales";
      det.unsupported.push_back({d.unsupported, "tensors", t->name});
    } else {
      auto exp = expected(meta, base, t->dtype == DType::F8_E4M3, d.is_matrix);
      if (exp.format && *exp.format != d.format) {
        det.warnings.push_back(base + ": metadata says " + format_name(*exp.format) + " (" + exp.provenance +
                               ") but the tensors are " + format_name(d.format) + " (" + evidence +
                               "); using " + format_name(d.format));
        d.provenance = "tensors: " + evidence + " (overrides " + exp.provenance + ")";
      } else if (exp.format) {
        d.provenance = exp.provenance + "; tensors agree: " + evidence;
      } else {
        d.provenance = "tensors: " + evidence;
      }
    }
    if (d.is_matrix) d.params = uint64_t(d.rows) * uint64_t(d.cols);
    else d.params = uint64_t(t->numel());
    keep(std::move(d));
  }
  // Pass 1b: compressed-tensors pack-quantized INT4 weights.
  for (const TensorInfo* t : ck.tensors()) {
    if (!ends_with(t->name, ".weight_packed")) continue;
    const std::string base = t->name.substr(0, t->name.size() - 14);
    DetectedTensor d;
    d.name = base;
    std::string evidence;
    if (!classify_int4(ck, base, *t, &d, &evidence)) continue;  // pass 2 names it unsupported
    if (meta.quant_method != "compressed-tensors" && !meta.quant_method.empty())
      det.warnings.push_back(base + ": config.json says quant_method " + meta.quant_method +
                             " but the tensors are compressed-tensors int4 (" + evidence + "); using int4");
    if (!meta.ct_desc.empty()) {
      // As for every format: the tensors win over metadata that contradicts them.
      const int64_t group = d.cols / d.parts[1]->shape[1];
      if (group != meta.ct_group) {
        det.warnings.push_back(base + ": metadata says group_size " + std::to_string(meta.ct_group) + " (" +
                               meta.ct_desc + ") but the tensors have groups of " + std::to_string(group) +
                               " (" + evidence + "); using " + std::to_string(group));
        d.provenance = "tensors: " + evidence + " (overrides " + meta.ct_desc + ")";
      } else {
        d.provenance = meta.ct_desc + "; tensors agree: " + evidence;
      }
    } else {
      d.provenance = "tensors: " + evidence;
    }
    d.params = uint64_t(d.rows) * uint64_t(d.cols);
    keep(std::move(d));
  }
  // Pass 1c: gpt-oss MXFP4 *_blocks + *_scales.
  for (const TensorInfo* t : ck.tensors()) {
    if (!ends_with(t->name, "_blocks")) continue;
    const std::string base = t->name.substr(0, t->name.size() - 7);
    DetectedTensor d;
    d.name = base;
    std::string evidence;
    classify_blocks(ck, base, *t, &d, &evidence);
    if (!meta.mxfp4_desc.empty() && not_converted(meta, base)) {
      det.warnings.push_back(base + ": metadata says not quantized (" + meta.mxfp4_desc +
                             ") but the tensors are mxfp4 (" + evidence + "); using mxfp4");
      d.provenance = "tensors: " + evidence + " (overrides " + meta.mxfp4_desc + ")";
    } else if (!meta.mxfp4_desc.empty()) {
      d.provenance = meta.mxfp4_desc + "; tensors agree: " + evidence;
    } else {
      d.provenance = "tensors: " + evidence;
    }
    d.params = uint64_t(d.rows) * uint64_t(d.cols);
    keep(std::move(d));
  }
  // Pass 2: everything else stands alone.
  for (const TensorInfo* t : ck.tensors()) {
    if (consumed.count(t->name)) continue;
    DetectedTensor d;
    d.name = t->name;
    d.parts = {t};
    d.params = uint64_t(t->numel());
    d.bytes = t->nbytes;
    if (ends_with(t->name, "_scales") && (t->dtype == DType::U8 || t->dtype == DType::F8_E8M0))
      fail(t->file, ": tensor ", t->name, " is an MXFP4 scale with no blocks (",
           t->name.substr(0, t->name.size() - 7), "_blocks is missing)");
    std::optional<std::string> method = unsupported_by_name(t->name);
    for (const char* suffix : {".scale", ".weight_scale", ".weight_scale_2", ".weight_scale_inv", ".input_scale"}) {
      if (method) break;
      if (ends_with(t->name, suffix)) {
        std::string base = t->name.substr(0, t->name.size() - std::string(suffix).size());
        // The scale of a layout nibble recognises but cannot run (a
        // pack-quantized weight nibble can run was consumed in pass 1).
        if (ck.find(base + ".weight_packed")) {
          method = "compressed-tensors (pack-quantized) weight that is not int4 symmetric";
          break;
        }
        if (ck.find(base + ".qweight")) {
          method = "gptq/awq packed int4";
          break;
        }
        if (!ck.find(base + ".weight"))
          fail(t->file, ": tensor ", t->name, " is a scale with no weight (", base, ".weight is missing)");
        fail(t->file, ": tensor ", t->name, " does not fit weight ", base, ".weight (",
             dtype_name(ck.find(base + ".weight")->dtype), "): dtype ", dtype_name(t->dtype));
      }
    }
    if (method) {
      det.unsupported.push_back({*method, "tensor names", t->name});
      d.unsupported = *method;
      d.format = Format::int_index;
      d.provenance = "unsupported: " + *method;
    } else {
      switch (t->dtype) {
        case DType::BF16: d.format = Format::bf16; break;
        case DType::F32: d.format = Format::f32; break;
        case DType::I64: case DType::I32: case DType::U8: case DType::I8: case DType::U32:
        case DType::I16: case DType::U16: case DType::U64: case DType::BOOL:
          d.format = Format::int_index;
          break;
        default:
          d.format = Format::int_index;
          d.unsupported = std::string("standalone ") + dtype_name(t->dtype) + " tensor";
          det.unsupported.push_back({d.unsupported, "tensors", t->name});
      }
      d.provenance = std::string("dtype ") + dtype_name(t->dtype);
    }
    det.tensors.push_back(std::move(d));
  }
  std::sort(det.tensors.begin(), det.tensors.end(),
            [](const DetectedTensor& a, const DetectedTensor& b) { return a.name < b.name; });
  return det;
}

WeightView weight_view(const DetectedTensor& t) {
  if (!t.is_matrix) fail("tensor ", t.name, " is not a weight matrix");
  WeightView v;
  v.format = t.format;
  v.rows = t.rows;
  v.cols = t.cols;
  v.name = t.name;
  v.data = t.parts[0]->data;
  switch (t.format) {
    case Format::mxfp4:
      v.scales = t.parts[1]->data;
      break;
    case Format::nvfp4: {
      v.scales = t.parts[1]->data;
      float g;
      std::memcpy(&g, t.parts[2]->data, 4);
      v.global_scale = g;
      break;
    }
    case Format::fp8_block128:
      v.scales = t.parts[1]->data;
      v.fp8_scale = t.parts[1]->dtype == DType::F32 ? Fp8ScaleType::f32 : Fp8ScaleType::ue8m0;
      break;
    case Format::int4:
      v.scales = t.parts[1]->data;
      v.group = t.cols / t.parts[1]->shape[1];
      break;
    default:
      break;
  }
  return v;
}

}  // namespace nibble
