// `nibble convert` from NVFP4 to MXFP4 and from BF16 to either format, on the
// committed fixtures, against the oracle of tools/gen_convert_fixtures.py and
// against the source values.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "convert_test_util.h"
#include "format/block.h"

namespace nibble {
namespace {

using namespace convert_test;

// Runs a conversion and checks its report and expert tensors against an
// expected case; returns the report.
nlohmann::json convert_and_compare(const std::string& src, const std::string& to, const std::string& expect_case,
                                   TempDir& dir, bool skip_input_scale = false) {
  RunResult run = run_nibble({"convert", src, dir.str("out"), "--to", to, "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  if (run.exit_code != 0) return {};
  auto report = nlohmann::json::parse(run.out);
  auto want = read_json(fixture("convert/expected/" + expect_case + ".json"));
  EXPECT_EQ(report["ops"].size(), 1u);
  const auto& op = report["ops"][0];
  for (const char* k : {"op", "block_elements", "tensors", "blocks", "blocks_exact", "blocks_requantized"})
    EXPECT_EQ(op[k], want[k]) << expect_case << ": " << k;
  EXPECT_EQ(op["max_abs_error"].get<double>(), want["max_abs_error"].get<double>()) << expect_case;

  auto dst = Checkpoint::open(dir.str("out"));
  int n = 0;
  for (const auto& [name, t] : read_expected(fixture("convert/expected/" + expect_case + ".safetensors"))) {
    if (skip_input_scale && name.find(".input_scale") != std::string::npos) continue;
    const TensorInfo* g = dst->find(name);
    EXPECT_NE(g, nullptr) << name;
    if (!g) continue;
    EXPECT_EQ(dtype_name(g->dtype), t.dtype) << name;
    EXPECT_EQ(g->shape, t.shape) << name;
    EXPECT_EQ(tensor_bytes(*g), t.bytes) << expect_case << ": " << name;
    ++n;
  }
  EXPECT_GT(n, 0);
  return report;
}

void expect_non_experts_identical(const std::string& src_dir, const std::string& out_dir) {
  auto src = Checkpoint::open(src_dir);
  auto dst = Checkpoint::open(out_dir);
  for (const TensorInfo* t : src->tensors()) {
    if (t->name.find(".ffn.experts.") != std::string::npos) continue;
    const TensorInfo* d = dst->find(t->name);
    ASSERT_NE(d, nullptr) << t->name;
    EXPECT_EQ(d->dtype, t->dtype) << t->name;
    EXPECT_EQ(tensor_bytes(*d), tensor_bytes(*t)) << t->name;
  }
}

TEST(ConvertMxfp4, LossyNvfp4SourceMatchesTheOracleAndReportsTheError) {
  TempDir dir;
  auto r = convert_and_compare(fixture("convert/dsv4_nvfp4_lossy"), "mxfp4", "nvfp4_lossy_to_mxfp4", dir);
  ASSERT_FALSE(r.is_null());
  EXPECT_GT(r["total"]["max_abs_error"].get<double>(), 0.0);
  EXPECT_GT(r["total"]["blocks_lossy"].get<int64_t>(), 0);
  EXPECT_NE(r["max_error_tensor"].get<std::string>(), "");
  expect_non_experts_identical(fixture("convert/dsv4_nvfp4_lossy"), dir.str("out"));
  // DeepSeek's stock convention: no hf_quant_config.json, expert_dtype "fp4",
  // quantization_config back to the FP8 stanza alone.
  EXPECT_FALSE(std::filesystem::exists(dir.str("out/hf_quant_config.json")));
  auto cfg = read_json(dir.str("out/config.json"));
  EXPECT_EQ(cfg["expert_dtype"], "fp4");
  auto want_qc = read_json(fixture("checkpoints/dsv4_stock/config.json"))["quantization_config"];
  EXPECT_EQ(cfg["quantization_config"], want_qc);
  Detection det = detect_formats(*Checkpoint::open(dir.str("out")));
  int mx = 0;
  for (const auto& t : det.tensors) {
    EXPECT_NE(t.format, Format::nvfp4) << t.name;
    if (t.format == Format::mxfp4) ++mx;
  }
  EXPECT_EQ(mx, 48);
  EXPECT_TRUE(det.warnings.empty()) << det.warnings.front();
}

TEST(ConvertMxfp4, CastNvfp4ComesBackWithTheStockValues) {
  // dsv4_nvfp4_current is the lossless cast of dsv4_stock: going back loses
  // nothing, every block is exact, and every value equals the stock one.
  TempDir dir;
  RunResult run = run_nibble({"convert", fixture("checkpoints/dsv4_nvfp4_current"), dir.str("out"), "--to", "mxfp4",
                              "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto r = nlohmann::json::parse(run.out);
  EXPECT_EQ(r["total"]["blocks_exact"], r["total"]["blocks"]);
  EXPECT_EQ(r["total"]["max_abs_error"], 0.0);
  auto stock = Checkpoint::open(fixture("checkpoints/dsv4_stock"));
  auto out = Checkpoint::open(dir.str("out"));
  Detection ds = detect_formats(*stock), dout = detect_formats(*out);
  std::map<std::string, const DetectedTensor*> by_name;
  for (const auto& t : dout.tensors) by_name[t.name] = &t;
  int n = 0;
  for (const auto& s : ds.tensors) {
    if (s.format != Format::mxfp4) continue;
    const DetectedTensor& o = *by_name.at(s.name);
    ASSERT_EQ(o.format, Format::mxfp4) << s.name;
    std::vector<float> a(size_t(s.rows * s.cols)), b(a.size());
    for (int64_t row = 0; row < s.rows; ++row) {
      mxfp4_dequantize_row(s.parts[0]->data + row * s.cols / 2, s.parts[1]->data + row * s.cols / 32, s.cols,
                           a.data() + row * s.cols);
      mxfp4_dequantize_row(o.parts[0]->data + row * s.cols / 2, o.parts[1]->data + row * s.cols / 32, s.cols,
                           b.data() + row * s.cols);
    }
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << s.name;
    ++n;
  }
  EXPECT_EQ(n, 48);
}

TEST(ConvertBf16, ToNvfp4MatchesTheOracle) {
  TempDir dir;
  auto r = convert_and_compare(fixture("checkpoints/dsv4_bf16"), "nvfp4", "bf16_to_nvfp4", dir);
  ASSERT_FALSE(r.is_null());
  // BF16 MTP experts are quantized too (--mtp-experts auto).
  EXPECT_EQ(r["experts_converted"], 48);
  expect_non_experts_identical(fixture("checkpoints/dsv4_bf16"), dir.str("out"));
  // No FP8 stanza to keep in an all-BF16 model: quant_method "modelopt".
  auto cfg = read_json(dir.str("out/config.json"));
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "modelopt");
  EXPECT_EQ(cfg["quantization_config"]["moe_quant_algo"], "NVFP4");
  auto hq = read_json(dir.str("out/hf_quant_config.json"));
  EXPECT_TRUE(hq["quantization"]["quantized_layers"].contains("mtp.0.ffn.experts"));
  Detection det = detect_formats(*Checkpoint::open(dir.str("out")));
  int nv = 0;
  for (const auto& t : det.tensors) nv += t.format == Format::nvfp4;
  EXPECT_EQ(nv, 48);
  EXPECT_TRUE(det.unsupported.empty());
}

TEST(ConvertBf16, ToMxfp4MatchesTheOracle) {
  TempDir dir;
  auto r = convert_and_compare(fixture("checkpoints/dsv4_bf16"), "mxfp4", "bf16_to_mxfp4", dir);
  ASSERT_FALSE(r.is_null());
  expect_non_experts_identical(fixture("checkpoints/dsv4_bf16"), dir.str("out"));
  auto cfg = read_json(dir.str("out/config.json"));
  EXPECT_EQ(cfg["expert_dtype"], "fp4");
  EXPECT_FALSE(cfg.contains("quantization_config"));  // nothing else is quantized
  EXPECT_FALSE(std::filesystem::exists(dir.str("out/hf_quant_config.json")));
  // A single-file source stays a single file.
  EXPECT_TRUE(std::filesystem::exists(dir.str("out/model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.str("out/model.safetensors.index.json")));
  Detection det = detect_formats(*Checkpoint::open(dir.str("out")));
  int mx = 0;
  for (const auto& t : det.tensors) mx += t.format == Format::mxfp4;
  EXPECT_EQ(mx, 48);
}

}  // namespace
}  // namespace nibble
