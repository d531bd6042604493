// `nibble convert` on gpt-oss (docs/convert.md, "gpt-oss"): the published
// stacked MXFP4 experts of the tiny transformers fixtures
// (tests/fixtures/gptoss, tools/gen_gptoss_fixtures.py) to per-expert NVFP4
// and back.
//  - The NVFP4 tensors against the cast computed here from its definition
//    (k_max per expert from the source's scale bytes, E4M3 codes of powers
//    of two written out by the format's bit layout, the packed bytes the
//    source's slice), input_scale against the bound's formula, every other
//    tensor byte for byte.
//  - The converted model's logits: bit-identical to the source's with the
//    reference kernels (same dequantized values, f64 sums in the same order),
//    and within the fixtures' bound of transformers' logits.
//  - NVFP4 -> MXFP4 gives the source back byte for byte (tensors, file,
//    config.json).
//  - Bad input: a misshapen _scales, a NaN scale code, a per-expert set with
//    an expert missing, both layouts in one layer (convert and the loader),
//    and --to the format the checkpoint has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/expert_convert.h"
#include "convert_test_util.h"
#include "format/block.h"
#include "format/element.h"

namespace nibble {
namespace {

using namespace convert_test;
namespace fs = std::filesystem;

std::string gptoss(const std::string& name) { return fixture("gptoss/" + name); }

// The E4M3 code of 2^p, p in [-9, 8], from the format's bit layout (sign 0,
// exponent bias 7, 3 mantissa bits; below 2^-6 subnormal: m / 8 * 2^-6).
uint8_t e4m3_pow2(int p) {
  if (p >= -6) return uint8_t((p + 7) << 3);
  return uint8_t(1 << (p + 9));
}

float bf16_at(const TensorInfo& t, int64_t i) {
  uint16_t h;
  std::memcpy(&h, t.data + 2 * i, 2);
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f32_scalar(const TensorInfo& t) {
  float v;
  std::memcpy(&v, t.data, 4);
  return v;
}

// A copy of a one-shard model folder with its tensors edited: `edit` gets
// name -> (spec, bytes) and may change, add or remove entries.
struct Tensor {
  TensorSpec spec;
  std::string bytes;
};
void rewrite_model(const std::string& from, const std::string& to,
                   const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  fs::create_directories(to);
  std::map<std::string, Tensor> tensors;
  {
    auto ck = Checkpoint::open(from);
    for (const TensorInfo* t : ck->tensors()) tensors[t->name] = {{t->name, t->dtype, t->shape}, tensor_bytes(*t)};
  }
  edit(tensors);
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back(t.spec);
  sort_like_safetensors(specs);
  SafetensorsWriter w(to + "/model.safetensors", specs);
  for (const auto& s : specs) w.write_tensor(s.name, tensors.at(s.name).bytes.data(), tensors.at(s.name).bytes.size());
  w.finish();
  for (const char* f : {"config.json", "hf_quant_config.json"})
    if (fs::exists(from + "/" + f)) fs::copy_file(from + "/" + f, to + "/" + f);
}

struct Cfg {
  int64_t layers, experts, hidden, inter;
  double limit;
};
Cfg read_cfg(const std::string& dir) {
  auto j = read_json(dir + "/config.json");
  return {j.at("num_hidden_layers").get<int64_t>(), j.at("num_local_experts").get<int64_t>(),
          j.at("hidden_size").get<int64_t>(), j.at("intermediate_size").get<int64_t>(),
          j.at("swiglu_limit").get<double>()};
}

RunResult convert(const std::string& src, const std::string& dst, const char* to) {
  return run_nibble({"convert", src, dst, "--to", to, "--json", "--quiet"});
}

class ConvertGptOss : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvertGptOss, Mxfp4ToNvfp4IsTheLosslessCastPerExpert) {
  TempDir dir;
  const std::string src = gptoss(GetParam()), dst = dir.str("nv");
  RunResult r = convert(src, dst, "nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Cfg c = read_cfg(src);
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["experts_converted"].get<int64_t>(), 2 * c.layers * c.experts);
  EXPECT_EQ(report["total"]["blocks_exact"], report["total"]["blocks"]);
  EXPECT_EQ(report["total"]["blocks_requantized"].get<int64_t>(), 0);
  EXPECT_TRUE(report["warnings"].empty()) << report["warnings"];

  auto in = Checkpoint::open(src), out = Checkpoint::open(dst);
  std::set<std::string> expert_tensors;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string x = "model.layers." + std::to_string(l) + ".mlp.experts.";
    // gamma of the norm the gate_up input comes from
    const TensorInfo* gamma = in->find("model.layers." + std::to_string(l) + ".post_attention_layernorm.weight");
    ASSERT_TRUE(gamma);
    double gmax = 0;
    for (int64_t i = 0; i < gamma->numel(); ++i) gmax = std::max(gmax, double(std::fabs(bf16_at(*gamma, i))));
    for (const std::string proj : {"gate_up_proj", "down_proj"}) {
      const TensorInfo* blocks = in->find(x + proj + "_blocks");
      const TensorInfo* scales = in->find(x + proj + "_scales");
      ASSERT_TRUE(blocks && scales);
      EXPECT_FALSE(out->find(x + proj + "_blocks")) << "the stacked tensor must be gone";
      const int64_t rows = proj == "gate_up_proj" ? 2 * c.inter : c.hidden;
      const int64_t cols = proj == "gate_up_proj" ? c.hidden : c.inter;
      ASSERT_EQ(blocks->shape, (std::vector<int64_t>{c.experts, rows, cols / 32, 16}));
      const int64_t mx = rows * cols / 32;
      for (int64_t e = 0; e < c.experts; ++e) {
        SCOPED_TRACE(x + std::to_string(e) + "." + proj);
        const std::string base = x + std::to_string(e) + "." + proj;
        const TensorInfo* w = out->find(base + ".weight");
        const TensorInfo* ws = out->find(base + ".weight_scale");
        const TensorInfo* ws2 = out->find(base + ".weight_scale_2");
        const TensorInfo* is = out->find(base + ".input_scale");
        ASSERT_TRUE(w && ws && ws2 && is);
        for (const TensorInfo* t : {w, ws, ws2, is}) expert_tensors.insert(t->name);
        EXPECT_EQ(w->dtype, DType::U8);
        EXPECT_EQ(w->shape, (std::vector<int64_t>{rows, cols / 2}));
        EXPECT_EQ(ws->dtype, DType::F8_E4M3);
        EXPECT_EQ(ws->shape, (std::vector<int64_t>{rows, cols / 16}));
        EXPECT_EQ(ws2->dtype, DType::F32);
        EXPECT_TRUE(ws2->shape.empty());
        EXPECT_TRUE(is->shape.empty());
        // Expert e's slice of the stacked source.
        const uint8_t* sc = scales->data + e * mx;
        int kmax = -1000, kmin = 1000;
        for (int64_t i = 0; i < mx; ++i) {
          kmax = std::max(kmax, int(sc[i]) - 127);
          kmin = std::min(kmin, int(sc[i]) - 127);
        }
        ASSERT_LE(kmax - kmin, 17) << "the fixture's blocks all lie in E4M3's window";
        EXPECT_EQ(tensor_bytes(*w), std::string(reinterpret_cast<const char*>(blocks->data) + e * rows * cols / 2,
                                                size_t(rows * cols / 2)));
        std::string want_scales(size_t(2 * mx), '\0');
        for (int64_t i = 0; i < mx; ++i) want_scales[size_t(2 * i)] = want_scales[size_t(2 * i + 1)] =
            char(e4m3_pow2(int(sc[i]) - 127 - kmax + 8));
        EXPECT_EQ(tensor_bytes(*ws), want_scales);
        EXPECT_EQ(f32_scalar(*ws2), std::ldexp(1.0f, kmax - 8));
        // input_scale: the bound of docs/convert.md over 6 * 448.
        const double alpha = 1.702, L = c.limit;
        const double bound = proj == "gate_up_proj"
                                 ? std::sqrt(double(c.hidden)) * gmax
                                 : (L + 1) * std::max(L / (1 + std::exp(-alpha * L)), 0.2785 / alpha);
        EXPECT_NEAR(f32_scalar(*is), bound / 2688.0, 1e-6 * bound / 2688.0);
      }
    }
  }
  // Everything else byte for byte, nothing else added.
  size_t copied = 0;
  for (const TensorInfo* t : out->tensors()) {
    if (expert_tensors.count(t->name)) continue;
    const TensorInfo* s = in->find(t->name);
    ASSERT_TRUE(s) << t->name << " is not a source tensor";
    EXPECT_EQ(t->dtype, s->dtype) << t->name;
    EXPECT_EQ(t->shape, s->shape) << t->name;
    EXPECT_EQ(tensor_bytes(*t), tensor_bytes(*s)) << t->name;
    ++copied;
  }
  EXPECT_EQ(copied + size_t(4 * c.layers) , in->tensors().size()) << "all but the 4 stacked tensors per layer copied";

  // Metadata: ModelOpt's NVFP4, the modules transformers does not convert excluded.
  auto hf = read_json(dst + "/hf_quant_config.json");
  EXPECT_EQ(hf["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(hf["quantization"]["group_size"], 16);
  EXPECT_EQ(hf["quantization"]["exclude_modules"],
            nlohmann::json({"model.layers.*.self_attn*", "model.layers.*.mlp.router*", "model.embed_tokens*", "lm_head*"}));
  auto cfg_in = read_json(src + "/config.json"), cfg_out = read_json(dst + "/config.json");
  EXPECT_EQ(cfg_out["quantization_config"]["quant_method"], "modelopt");
  EXPECT_EQ(cfg_out["quantization_config"]["quant_algo"], "NVFP4");
  EXPECT_EQ(cfg_out["quantization_config"]["ignore"], hf["quantization"]["exclude_modules"]);
  cfg_in.erase("quantization_config");
  cfg_out.erase("quantization_config");
  EXPECT_EQ(cfg_in, cfg_out);
}

TEST_P(ConvertGptOss, ConvertedModelGivesTheSameLogits) {
  TempDir dir;
  const std::string src = gptoss(GetParam()), dst = dir.str("nv");
  RunResult r = convert(src, dst, "nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The fixture's first sequence and transformers' logits for it.
  auto manifest = read_json(src + "/expected/manifest.json");
  const auto& seq = manifest["sequences"][0];
  std::string tokens;
  for (const auto& t : seq["tokens"]) tokens += (tokens.empty() ? "" : ",") + std::to_string(t.get<int>());
  const int64_t V = manifest["vocab_size"].get<int64_t>(), n = int64_t(seq["tokens"].size());
  const std::string hf = read_file(src + "/expected/" + seq["logits"].get<std::string>());
  ASSERT_EQ(hf.size(), size_t(n * V * 4));
  for (const std::string backend : {"cpu_ref", "auto"}) {
    SCOPED_TRACE(backend);
    RunResult a = run_nibble({"logits", src, "--tokens", tokens, "--out", dir.str("a.bin"), "--moe-backend", backend});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    RunResult b = run_nibble({"logits", dst, "--tokens", tokens, "--out", dir.str("b.bin"), "--moe-backend", backend});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const std::string la = read_file(dir.str("a.bin")), lb = read_file(dir.str("b.bin"));
    ASSERT_EQ(la.size(), hf.size());
    ASSERT_EQ(lb.size(), hf.size());
    std::vector<float> fa(la.size() / 4), fb(lb.size() / 4), fh(hf.size() / 4);
    std::memcpy(fa.data(), la.data(), la.size());
    std::memcpy(fb.data(), lb.data(), lb.size());
    std::memcpy(fh.data(), hf.data(), hf.size());
    // The reference kernels dequantize each weight to the same f32 values
    // and sum them in f64 in one order: bit for bit. The SIMD kernels sum
    // in f32 in an order that follows the block size (32 vs 16 per scale),
    // so they may differ by f32 rounding: 1e-5 of the largest logit, ten
    // times under the fixtures' bound against transformers.
    if (backend == "cpu_ref") {
      EXPECT_EQ(la, lb);
    }
    double amax = 0, diff = 0, hf_err = 0;
    for (size_t i = 0; i < fa.size(); ++i) {
      amax = std::max(amax, double(std::fabs(fh[i])));
      diff = std::max(diff, double(std::fabs(fa[i] - fb[i])));
      hf_err = std::max(hf_err, double(std::fabs(fb[i] - fh[i])));
    }
    std::printf("[ %s %s ] converted vs source max |diff| %.3g, vs transformers %.3g (largest logit %.3g)\n",
                GetParam().c_str(), backend.c_str(), diff, hf_err, amax);
    EXPECT_LE(diff, 1e-5 * amax);
    EXPECT_LE(hf_err, 1e-4 * amax) << "the fixtures' bound against transformers (gpt_oss_test.cpp)";
  }
}

TEST_P(ConvertGptOss, BackToMxfp4IsTheSourceByteForByte) {
  TempDir dir;
  const std::string src = gptoss(GetParam());
  RunResult r = convert(src, dir.str("nv"), "nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = convert(dir.str("nv"), dir.str("mx"), "mxfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto report = nlohmann::json::parse(r.out);
  const Cfg c = read_cfg(src);
  EXPECT_EQ(report["experts_converted"].get<int64_t>(), 2 * c.layers * c.experts);
  EXPECT_EQ(report["total"]["blocks_exact"], report["total"]["blocks"]);
  EXPECT_EQ(report["total"]["blocks_requantized"].get<int64_t>(), 0) << "every block restored, none re-quantized";
  auto in = Checkpoint::open(src), out = Checkpoint::open(dir.str("mx"));
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  for (const TensorInfo* t : in->tensors()) {
    const TensorInfo* o = out->find(t->name);
    ASSERT_TRUE(o) << t->name;
    EXPECT_EQ(o->dtype, t->dtype) << t->name;
    EXPECT_EQ(o->shape, t->shape) << t->name;
    EXPECT_EQ(tensor_bytes(*o), tensor_bytes(*t)) << t->name;
  }
  // The fixture was written in the reference library's order, as convert writes.
  EXPECT_EQ(read_file(dir.str("mx/model.safetensors")), read_file(src + "/model.safetensors"));
  EXPECT_EQ(read_json(dir.str("mx/config.json")), read_json(src + "/config.json"));
  EXPECT_FALSE(fs::exists(dir.str("mx/hf_quant_config.json")));
}

TEST_P(ConvertGptOss, ExplainShowsNvfp4Experts) {
  TempDir dir;
  RunResult r = convert(gptoss(GetParam()), dir.str("nv"), "nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RunResult e = run_nibble({"explain", dir.str("nv"), "--bandwidth", "10"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("GptOssForCausalLM"), std::string::npos) << e.out;
  std::string line;
  for (size_t p = e.out.find("\nrouted_experts"); p != std::string::npos; p = e.out.find("\nrouted_experts", p + 1)) {
    const std::string l = e.out.substr(p + 1, e.out.find('\n', p + 1) - p - 1);
    if (l.find("nvfp4") != std::string::npos) line = e.out.substr(p + 1, 600);
  }
  ASSERT_FALSE(line.empty()) << e.out;
  EXPECT_NE(line.find("quant_algo NVFP4; tensors agree"), std::string::npos) << line;
  // No group of the table (name, format, ...) is MXFP4 any more.
  std::istringstream lines(e.out);
  for (std::string l; std::getline(lines, l);) {
    std::istringstream words(l);
    std::string group, format;
    words >> group >> format;
    EXPECT_NE(format, "mxfp4") << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConvertGptOss, ::testing::Values("tiny_a", "tiny_b"));

// An MX block whose largest code is small (here 1.0): OCP's quantizer would
// pick a scale 2 binades lower and double every code, the same values in
// other bytes. The restoring path gives back the bytes the cast came from.
TEST(ConvertGptOssBlocks, RestoringGivesTheCastSourceBytesWhereOcpWouldNot) {
  uint8_t packed[16], scale = 127 + 3;
  for (int i = 0; i < 16; ++i) packed[i] = uint8_t((i % 3) | (((i + 1) % 3) << 4) | 0x88 * (i % 2));  // codes 0, 0.5, 1, signs
  uint8_t nv_packed[16], nv_scales[2];
  CastStats cs = mxfp4_to_nvfp4(packed, &scale, 1, 32, /*k_max=*/3, nv_packed, nv_scales);
  ASSERT_EQ(cs.exact, 1);
  ExpertSource src;
  src.format = Format::nvfp4;
  src.rows = 1;
  src.cols = 32;
  src.data = nv_packed;
  src.scales = nv_scales;
  src.global_scale = mxfp4_to_nvfp4_global_scale(3);
  uint8_t back[16], back_scale = 0, ocp[16], ocp_scale = 0;
  ExpertTargetParams restore;
  restore.restore_cast_blocks = true;
  ExpertStats st = convert_expert_rows(src, ExpertOp::nvfp4_to_mxfp4, restore, 0, 1, back, &back_scale, "t");
  EXPECT_EQ(std::memcmp(back, packed, 16), 0);
  EXPECT_EQ(back_scale, scale);
  EXPECT_EQ(st.exact, 1);
  EXPECT_EQ(st.requantized, 0);
  convert_expert_rows(src, ExpertOp::nvfp4_to_mxfp4, {}, 0, 1, ocp, &ocp_scale, "t");
  EXPECT_EQ(ocp_scale, scale - 2) << "OCP: floor(log2 1.0) - 2 binades below the block's value scale";
  float a[32], b[32];
  mxfp4_dequantize_row(packed, &scale, 32, a);
  mxfp4_dequantize_row(ocp, &ocp_scale, 32, b);
  EXPECT_EQ(std::memcmp(a, b, sizeof a), 0) << "the same values either way";
}

// ---- Bad input ---------------------------------------------------------------

// Nothing of a failed conversion is left beside DST.
void expect_nothing_written(const TempDir& dir, const std::vector<std::string>& before) {
  EXPECT_EQ(list_dir(dir.str("")), before);
}

TEST(ConvertGptOssErrors, MisshapenScales) {
  TempDir dir;
  rewrite_model(gptoss("tiny_a"), dir.str("bad"), [](std::map<std::string, Tensor>& t) {
    Tensor& s = t.at("model.layers.1.mlp.experts.down_proj_scales");
    s.spec.shape.back() += 1;  // one block too many per row
    s.bytes.resize(size_t(s.spec.nbytes()), char(127));
  });
  const auto before = list_dir(dir.str(""));
  RunResult r = convert(dir.str("bad"), dir.str("out"), "nvfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.layers.1.mlp.experts.down_proj_scales"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shape"), std::string::npos) << r.err;
  expect_nothing_written(dir, before);
}

TEST(ConvertGptOssErrors, NanScaleCodeNamesTheElement) {
  TempDir dir;
  const Cfg c = read_cfg(gptoss("tiny_a"));
  rewrite_model(gptoss("tiny_a"), dir.str("bad"), [&](std::map<std::string, Tensor>& t) {
    Tensor& s = t.at("model.layers.2.mlp.experts.gate_up_proj_scales");
    const int64_t per_row = c.hidden / 32, rows = 2 * c.inter;
    s.bytes[size_t((4 * rows + 7) * per_row + 1)] = char(0xFF);  // expert 4, row 7, block 1
  });
  const auto before = list_dir(dir.str(""));
  RunResult r = convert(dir.str("bad"), dir.str("out"), "nvfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.layers.2.mlp.experts.gate_up_proj_scales element [4, 7, 1]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NaN"), std::string::npos) << r.err;
  expect_nothing_written(dir, before);
}

TEST(ConvertGptOssErrors, MissingPerExpertTensorIsNamedByConvertAndTheLoader) {
  TempDir dir;
  ASSERT_EQ(convert(gptoss("tiny_a"), dir.str("nv"), "nvfp4").exit_code, 0);
  rewrite_model(dir.str("nv"), dir.str("partial"), [](std::map<std::string, Tensor>& t) {
    for (const char* s : {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"})
      t.erase(std::string("model.layers.2.mlp.experts.4.down_proj") + s);
  });
  const auto before = list_dir(dir.str(""));
  RunResult r = convert(dir.str("partial"), dir.str("out"), "mxfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.layers.2.mlp.experts.4.down_proj.weight is missing"), std::string::npos) << r.err;
  expect_nothing_written(dir, before);
  RunResult l = run_nibble({"logits", dir.str("partial"), "--tokens", "1,2,3", "--out", dir.str("l.bin")});
  EXPECT_NE(l.exit_code, 0);
  EXPECT_NE(l.err.find("model.layers.2.mlp.experts.4.down_proj.weight is missing"), std::string::npos) << l.err;
}

TEST(ConvertGptOssErrors, ExpertBeyondNumLocalExperts) {
  TempDir dir;
  ASSERT_EQ(convert(gptoss("tiny_a"), dir.str("nv"), "nvfp4").exit_code, 0);
  const int64_t E = read_cfg(gptoss("tiny_a")).experts;
  // Expert E-1's down_proj renamed to expert E: E-1 is missing and E is one too many.
  rewrite_model(dir.str("nv"), dir.str("bad"), [&](std::map<std::string, Tensor>& t) {
    for (const char* s : {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"}) {
      const std::string from = "model.layers.1.mlp.experts." + std::to_string(E - 1) + ".down_proj" + s;
      const std::string to = "model.layers.1.mlp.experts." + std::to_string(E) + ".down_proj" + s;
      Tensor x = t.at(from);
      x.spec.name = to;
      t.erase(from);
      t[to] = x;
    }
  });
  RunResult r = convert(dir.str("bad"), dir.str("out"), "mxfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.layers.1.mlp.experts." + std::to_string(E) + ".down_proj.weight is expert " +
                       std::to_string(E)),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("num_local_experts is " + std::to_string(E)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.str("out")));
}

TEST(ConvertGptOssErrors, BothLayoutsInOneLayer) {
  TempDir dir;
  ASSERT_EQ(convert(gptoss("tiny_a"), dir.str("nv"), "nvfp4").exit_code, 0);
  auto src = Checkpoint::open(gptoss("tiny_a"));
  const TensorInfo* blocks = src->find("model.layers.0.mlp.experts.down_proj_blocks");
  const TensorInfo* scales = src->find("model.layers.0.mlp.experts.down_proj_scales");
  rewrite_model(dir.str("nv"), dir.str("mixed"), [&](std::map<std::string, Tensor>& t) {
    for (const TensorInfo* s : {blocks, scales}) t[s->name] = {{s->name, s->dtype, s->shape}, tensor_bytes(*s)};
  });
  const auto before = list_dir(dir.str(""));
  RunResult r = convert(dir.str("mixed"), dir.str("out"), "mxfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("layer 0 holds both stacked experts"), std::string::npos) << r.err;
  expect_nothing_written(dir, before);
  RunResult l = run_nibble({"logits", dir.str("mixed"), "--tokens", "1,2,3", "--out", dir.str("l.bin")});
  EXPECT_NE(l.exit_code, 0);
  EXPECT_NE(l.err.find("layer 0 holds both stacked experts"), std::string::npos) << l.err;
}

// --to the format the checkpoint already has: a copy, metadata included.
TEST(ConvertGptOssErrors, ToTheFormatItHasCopies) {
  TempDir dir;
  const std::string src = gptoss("tiny_b");
  RunResult r = convert(src, dir.str("same"), "mxfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto report = nlohmann::json::parse(r.out);
  const Cfg c = read_cfg(src);
  EXPECT_EQ(report["experts_converted"].get<int64_t>(), 0);
  EXPECT_EQ(report["experts_kept"].get<int64_t>(), 2 * c.layers * c.experts);
  EXPECT_EQ(read_file(dir.str("same/model.safetensors")), read_file(src + "/model.safetensors"));
  EXPECT_EQ(read_file(dir.str("same/config.json")), read_file(src + "/config.json"));

  ASSERT_EQ(convert(src, dir.str("nv"), "nvfp4").exit_code, 0);
  r = convert(dir.str("nv"), dir.str("nv2"), "nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["experts_converted"].get<int64_t>(), 0);
  for (const char* f : {"model.safetensors", "config.json", "hf_quant_config.json"})
    EXPECT_EQ(read_file(dir.str(std::string("nv2/") + f)), read_file(dir.str(std::string("nv/") + f))) << f;
}

}  // namespace
}  // namespace nibble
