// `nibble convert --to nvfp4` on the committed fixtures, run as a user runs
// it (the nibble binary), checked against independent oracles:
//  - tests/fixtures/checkpoints/dsv4_nvfp4_current: the same model cast to
//    NVFP4 by tools/gen_checkpoint_fixtures.py (numpy + ml_dtypes);
//  - tests/fixtures/convert/expected/*: tools/gen_convert_fixtures.py;
//  - the definitions: dequantized values of the source and the output.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "convert_test_util.h"
#include "format/block.h"

namespace nibble {
namespace {

using namespace convert_test;

// (layers|mtp).<digits>.ffn.experts.<digits>.w[123].<anything>
bool is_routed_expert(const std::string& name) {
  size_t i = 0;
  auto lit = [&](const char* s) {
    const size_t n = std::strlen(s);
    if (name.compare(i, n, s) != 0) return false;
    i += n;
    return true;
  };
  auto digits = [&] {
    const size_t b = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    return i > b;
  };
  if (!lit("layers.") && !lit("mtp.")) return false;
  if (!digits() || !lit(".ffn.experts.") || !digits() || !lit(".w")) return false;
  if (i >= name.size() || name[i] < '1' || name[i] > '3') return false;
  ++i;
  return lit(".");
}
bool is_mtp(const std::string& name) { return name.rfind("mtp.", 0) == 0; }

std::vector<float> dequant(const DetectedTensor& t) {
  std::vector<float> y(size_t(t.rows * t.cols));
  for (int64_t r = 0; r < t.rows; ++r) {
    const uint8_t* w = t.parts[0]->data + r * t.cols / 2;
    if (t.format == Format::mxfp4) {
      mxfp4_dequantize_row(w, t.parts[1]->data + r * t.cols / 32, t.cols, y.data() + r * t.cols);
    } else {
      float g;
      std::memcpy(&g, t.parts[2]->data, 4);
      nvfp4_dequantize_row(w, t.parts[1]->data + r * t.cols / 16, t.cols, g, y.data() + r * t.cols);
    }
  }
  return y;
}

// One conversion shared by the tests of this file.
class StockToNvfp4 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    src_before_ = new std::map<std::string, std::string>(snapshot(fixture("checkpoints/dsv4_stock")));
    run_ = new RunResult(run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir_->str("out"), "--to", "nvfp4",
                                     "--json"}));
  }
  static void TearDownTestSuite() {
    delete run_;
    delete src_before_;
    delete dir_;
  }
  static std::string out() { return dir_->str("out"); }

  static TempDir* dir_;
  static RunResult* run_;
  static std::map<std::string, std::string>* src_before_;
};
TempDir* StockToNvfp4::dir_ = nullptr;
RunResult* StockToNvfp4::run_ = nullptr;
std::map<std::string, std::string>* StockToNvfp4::src_before_ = nullptr;

TEST_F(StockToNvfp4, SucceedsAndLeavesSrcUntouched) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  EXPECT_EQ(snapshot(fixture("checkpoints/dsv4_stock")), *src_before_);
  // Only DST appeared: no temporary folder beside it.
  EXPECT_EQ(list_dir(dir_->str()), std::vector<std::string>{"out"});
}

TEST_F(StockToNvfp4, ExpertBytesEqualTheIndependentNvfp4Fixture) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto got = Checkpoint::open(out());
  auto want = Checkpoint::open(fixture("checkpoints/dsv4_nvfp4_current"));
  // Same tensor names, dtypes and shapes as ModelOpt's layout (checkpoints.md §2).
  ASSERT_EQ(got->tensors().size(), want->tensors().size());
  int compared = 0;
  for (const TensorInfo* w : want->tensors()) {
    const TensorInfo* g = got->find(w->name);
    ASSERT_NE(g, nullptr) << w->name;
    EXPECT_EQ(g->dtype, w->dtype) << w->name;
    EXPECT_EQ(g->shape, w->shape) << w->name;
    // input_scale is not a property of the weights (see docs/convert.md); every
    // other byte must match.
    if (w->name.size() > 12 && w->name.compare(w->name.size() - 12, 12, ".input_scale") == 0) continue;
    EXPECT_EQ(tensor_bytes(*g), tensor_bytes(*w)) << w->name;
    ++compared;
  }
  EXPECT_GT(compared, 200);
}

TEST_F(StockToNvfp4, EveryConvertedExpertDequantizesToTheSourceValues) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto src = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  auto dst = Checkpoint::open(out());
  Detection ds = detect_formats(*src), dd = detect_formats(*dst);
  std::map<std::string, const DetectedTensor*> out_by_name;
  for (const auto& t : dd.tensors) out_by_name[t.name] = &t;
  int nv = 0, kept = 0;
  for (const auto& s : ds.tensors) {
    if (s.format != Format::mxfp4) continue;
    const DetectedTensor& d = *out_by_name.at(s.name);
    if (is_mtp(s.name)) {
      EXPECT_EQ(d.format, Format::mxfp4) << s.name << ": MTP experts stay MXFP4 by default";
      ++kept;
    } else {
      ASSERT_EQ(d.format, Format::nvfp4) << s.name;
      ++nv;
    }
    std::vector<float> a = dequant(s), b = dequant(d);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << s.name << " differs bit for bit";
  }
  EXPECT_EQ(nv, 36);
  EXPECT_EQ(kept, 12);
}

TEST_F(StockToNvfp4, EveryOtherTensorIsByteIdentical) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto src = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  auto dst = Checkpoint::open(out());
  int same = 0;
  for (const TensorInfo* t : src->tensors()) {
    if (is_routed_expert(t->name) && !is_mtp(t->name)) {
      EXPECT_EQ(dst->find(t->name) != nullptr, t->name.find(".weight") != std::string::npos) << t->name;
      continue;
    }
    const TensorInfo* d = dst->find(t->name);
    ASSERT_NE(d, nullptr) << t->name;
    EXPECT_EQ(d->dtype, t->dtype) << t->name;
    EXPECT_EQ(d->shape, t->shape) << t->name;
    EXPECT_EQ(tensor_bytes(*d), tensor_bytes(*t)) << t->name;
    ++same;
  }
  EXPECT_GT(same, 150);
}

TEST_F(StockToNvfp4, LayoutMatchesModelOpt) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto dst = Checkpoint::open(out());
  // Per expert projection: weight U8 [out, in/2], weight_scale F8_E4M3
  // [out, in/16], weight_scale_2 and input_scale F32 scalars; no .scale; w1
  // and w3 share weight_scale_2 and input_scale.
  for (int layer = 0; layer < 3; ++layer) {
    for (int e = 0; e < 4; ++e) {
      std::string p = "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(e) + ".";
      for (const char* w : {"w1", "w2", "w3"}) {
        std::string b = p + w;
        const TensorInfo& wt = dst->get(b + ".weight");
        EXPECT_EQ(wt.dtype, DType::U8);
        const TensorInfo& ws = dst->get(b + ".weight_scale");
        EXPECT_EQ(ws.dtype, DType::F8_E4M3);
        EXPECT_EQ(ws.shape, (std::vector<int64_t>{wt.shape[0], wt.shape[1] * 2 / 16}));
        EXPECT_EQ(dst->get(b + ".weight_scale_2").dtype, DType::F32);
        EXPECT_EQ(dst->get(b + ".weight_scale_2").numel(), 1);
        EXPECT_EQ(dst->get(b + ".input_scale").dtype, DType::F32);
        EXPECT_EQ(dst->find(b + ".scale"), nullptr);
      }
      EXPECT_EQ(tensor_bytes(dst->get(p + "w1.weight_scale_2")), tensor_bytes(dst->get(p + "w3.weight_scale_2")));
      EXPECT_EQ(tensor_bytes(dst->get(p + "w1.input_scale")), tensor_bytes(dst->get(p + "w3.input_scale")));
    }
  }
  // Every tensor is aligned to its element size within the file.
  for (const TensorInfo* t : dst->tensors()) EXPECT_EQ(t->offset % dtype_size(t->dtype), 0u) << t->name;
  // The shards keep the source's names; the index lists every tensor.
  EXPECT_EQ(list_dir(out()), (std::vector<std::string>{"config.json", "generation_config.json", "hf_quant_config.json",
                                                       "model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors",
                                                       "model.safetensors.index.json"}));
  auto index = read_json(out() + "/model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"].size(), dst->tensors().size());
  uint64_t total = 0;
  for (const TensorInfo* t : dst->tensors()) total += t->nbytes;
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(read_file(out() + "/generation_config.json"),
            read_file(fixture("checkpoints/dsv4_stock/generation_config.json")));
}

TEST_F(StockToNvfp4, InputScaleIsTheDocumentedActivationBound) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto src = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  auto dst = Checkpoint::open(out());
  auto f32 = [](const TensorInfo& t) {
    float v;
    std::memcpy(&v, t.data, 4);
    return v;
  };
  for (int layer = 0; layer < 3; ++layer) {
    // w1/w3: sqrt(hidden) * max|ffn_norm| / 2688, hidden = 32 here.
    const TensorInfo& g = src->get("layers." + std::to_string(layer) + ".ffn_norm.weight");
    float gmax = 0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      uint16_t h;
      std::memcpy(&h, g.data + 2 * i, 2);
      uint32_t u = uint32_t(h) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      gmax = std::max(gmax, std::fabs(v));
    }
    const std::string p = "layers." + std::to_string(layer) + ".ffn.experts.3.";
    EXPECT_FLOAT_EQ(f32(dst->get(p + "w1.input_scale")), float(std::sqrt(32.0) * gmax / 2688.0));
    // w2: 1.5 (routed_scaling_factor) * 10 * silu(10) / 2688 (swiglu_limit 10).
    EXPECT_FLOAT_EQ(f32(dst->get(p + "w2.input_scale")), float(1.5 * 10 * 10 / (1 + std::exp(-10.0)) / 2688.0));
  }
}

TEST_F(StockToNvfp4, DetectionAndExplainSeeCurrentSchemaNvfp4Experts) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto dst = Checkpoint::open(out());
  Detection det = detect_formats(*dst);
  EXPECT_NE(det.metadata_schema.find("current schema"), std::string::npos) << det.metadata_schema;
  int nv = 0;
  for (const auto& t : det.tensors) {
    if (t.format != Format::nvfp4) continue;
    ++nv;
    EXPECT_FALSE(is_mtp(t.name));
    EXPECT_NE(t.provenance.find("quantized_layers"), std::string::npos) << t.provenance;
    EXPECT_NE(t.provenance.find("tensors agree"), std::string::npos) << t.provenance;
  }
  EXPECT_EQ(nv, 36);
  RunResult r = run_nibble({"explain", out(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  EXPECT_NE(plan["model"]["metadata_schema"].get<std::string>().find("current schema"), std::string::npos);
  bool saw_nvfp4_experts = false;
  for (const auto& g : plan["groups"])
    if (g["format"] == "nvfp4") saw_nvfp4_experts = true;
  EXPECT_TRUE(saw_nvfp4_experts) << r.out;
}

TEST_F(StockToNvfp4, MetadataIsModelOptCurrentSchema) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto hq = read_json(out() + "/hf_quant_config.json");
  EXPECT_EQ(hq["producer"]["name"], "nibble");
  const auto& q = hq["quantization"];
  EXPECT_EQ(q["quant_algo"], "MIXED_PRECISION");
  EXPECT_TRUE(q["kv_cache_quant_algo"].is_null());
  EXPECT_EQ(q["group_size"], 16);
  nlohmann::json layers = nlohmann::json::object();
  for (int i = 0; i < 3; ++i)
    layers["layers." + std::to_string(i) + ".ffn.experts"] = {{"quant_algo", "NVFP4"}, {"group_size", 16}};
  EXPECT_EQ(q["quantized_layers"], layers);
  EXPECT_EQ(q["exclude_modules"], nlohmann::json({"*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"}));

  auto cfg = read_json(out() + "/config.json");
  auto src_cfg = read_json(fixture("checkpoints/dsv4_stock/config.json"));
  const auto& qc = cfg["quantization_config"];
  for (auto it = src_cfg["quantization_config"].begin(); it != src_cfg["quantization_config"].end(); ++it)
    EXPECT_EQ(qc[it.key()], it.value()) << "FP8 stanza key " << it.key();
  EXPECT_EQ(qc["quant_method"], "fp8");
  EXPECT_EQ(qc["moe_quant_algo"], "NVFP4");
  EXPECT_EQ(qc["quant_algo"], "MIXED_PRECISION");
  EXPECT_EQ(qc["group_size"], 16);
  EXPECT_EQ(qc["quantized_layers"], layers);
  EXPECT_EQ(qc["ignore"], q["exclude_modules"]);
  EXPECT_EQ(qc["config_groups"]["group_0"]["weights"]["num_bits"], 4);
  EXPECT_EQ(qc["config_groups"]["group_0"]["input_activations"]["group_size"], 16);
  // Everything outside quantization_config is as it was.
  for (auto it = src_cfg.begin(); it != src_cfg.end(); ++it)
    if (it.key() != "quantization_config") {
      EXPECT_EQ(cfg[it.key()], it.value()) << it.key();
    }
}

TEST_F(StockToNvfp4, JsonReportCountsWhatWasDone) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  auto r = nlohmann::json::parse(run_->out);
  EXPECT_EQ(r["target"], "nvfp4");
  EXPECT_EQ(r["experts_converted"], 36);
  EXPECT_EQ(r["experts_kept"], 12);
  EXPECT_EQ(r["mtp_experts_kept"], 12);
  ASSERT_EQ(r["ops"].size(), 1u);
  EXPECT_EQ(r["ops"][0]["op"], "mxfp4->nvfp4");
  // 36 matrices of 32 x 32: one 32-block per row.
  EXPECT_EQ(r["total"]["blocks"], 36 * 32);
  EXPECT_EQ(r["total"]["blocks_exact"], 36 * 32);
  EXPECT_EQ(r["total"]["blocks_requantized"], 0);
  EXPECT_EQ(r["total"]["max_abs_error"], 0.0);
  auto src = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  EXPECT_EQ(r["bytes_in"].get<uint64_t>(), src->total_bytes());
  uint64_t shard_bytes = 0;
  for (const auto& name : list_dir(out()))
    if (name.find(".safetensors") != std::string::npos && name.find("index") == std::string::npos)
      shard_bytes += read_file(out() + "/" + name).size();
  EXPECT_EQ(r["bytes_out"].get<uint64_t>(), shard_bytes);
  EXPECT_EQ(r["tensors_in"], int64_t(src->tensors().size()));
  EXPECT_EQ(r["tensors_out"], int64_t(src->tensors().size()) + 36 * 2);  // .scale -> weight_scale + 2 scalars
  EXPECT_GT(r["seconds"].get<double>(), 0.0);
}

TEST(ConvertNvfp4, BlocksOutsideTheWindowAreCountedAndMatchTheOracle) {
  TempDir dir;
  RunResult run = run_nibble({"convert", fixture("convert/dsv4_wide"), dir.str("out"), "--to", "nvfp4", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto report = nlohmann::json::parse(run.out);
  auto want = read_json(fixture("convert/expected/wide_to_nvfp4.json"));
  ASSERT_EQ(report["ops"].size(), 1u);
  const auto& op = report["ops"][0];
  for (const char* k : {"op", "block_elements", "tensors", "blocks", "blocks_exact", "blocks_requantized"})
    EXPECT_EQ(op[k], want[k]) << k;
  EXPECT_EQ(op["max_abs_error"].get<double>(), want["max_abs_error"].get<double>());
  EXPECT_GT(want["blocks_requantized"].get<int>(), 0);
  // Where the error occurred: the w2 whose k_max was raised by 2^17.
  EXPECT_EQ(report["max_error_tensor"], "layers.1.ffn.experts.2.w2");
  // The error of a re-quantized block is at most 6 * 2^(k_max - 18), with
  // k_max = 13 in that tensor.
  EXPECT_LE(op["max_abs_error"].get<double>(), 6.0 * std::ldexp(1.0, 13 - 18));

  auto dst = Checkpoint::open(dir.str("out"));
  int n = 0;
  for (const auto& [name, t] : read_expected(fixture("convert/expected/wide_to_nvfp4.safetensors"))) {
    if (name.find(".input_scale") != std::string::npos) continue;
    const TensorInfo* g = dst->find(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(dtype_name(g->dtype), t.dtype) << name;
    EXPECT_EQ(g->shape, t.shape) << name;
    EXPECT_EQ(tensor_bytes(*g), t.bytes) << name;
    ++n;
  }
  EXPECT_EQ(n, 36 * 3);
}

TEST(ConvertNvfp4, OtherFilesAreCopiedAndHiddenOnesAreNot) {
  TempDir dir;
  RunResult run = run_nibble({"convert", fixture("convert/dsv4_wide"), dir.str("out"), "--to", "nvfp4"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "README.md", "generation_config.json",
                        "encoding/encoding_dsv4.py"})
    EXPECT_EQ(read_file(dir.str("out/") + f), read_file(fixture("convert/dsv4_wide/") + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(dir.str("out/.cache")));
  // The text report names what happened.
  EXPECT_NE(run.out.find("mxfp4->nvfp4"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("re-quantized"), std::string::npos) << run.out;
}

TEST(ConvertNvfp4, MtpExpertsConvertOnRequest) {
  TempDir dir;
  RunResult run = run_nibble({"convert", fixture("checkpoints/dsv4_stock"), dir.str("out"), "--to", "nvfp4",
                              "--mtp-experts", "convert", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto r = nlohmann::json::parse(run.out);
  EXPECT_EQ(r["experts_converted"], 48);
  EXPECT_EQ(r["experts_kept"], 0);
  auto hq = read_json(dir.str("out/hf_quant_config.json"));
  EXPECT_TRUE(hq["quantization"]["quantized_layers"].contains("mtp.0.ffn.experts"));
  auto ex = hq["quantization"]["exclude_modules"];
  EXPECT_EQ(std::find(ex.begin(), ex.end(), "mtp.*"), ex.end());
  auto dst = Checkpoint::open(dir.str("out"));
  Detection det = detect_formats(*dst);
  for (const auto& t : det.tensors)
    if (is_mtp(t.name) && t.name.find(".ffn.experts.") != std::string::npos) {
      EXPECT_EQ(t.format, Format::nvfp4) << t.name;
    }
  // FP8 projections of the MTP block stay excluded.
  EXPECT_NE(std::find(ex.begin(), ex.end(), "mtp.*.e_proj"), ex.end());
}

}  // namespace
}  // namespace nibble
