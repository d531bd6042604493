// Every committed checkpoint fixture opens, and what the reader returns
// (names, dtypes, shapes, shard, bytes) is exactly what the Python generator
// recorded in tests/fixtures/checkpoints/manifests/ (FNV-1a 64 of each
// tensor's bytes, computed in Python from the arrays it saved).
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "test_util.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints";

std::string fnv1a64(const uint8_t* p, uint64_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

std::vector<std::string> manifest_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kFixtures + "/manifests"))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Fixtures, AllPresent) {
  std::set<std::string> have;
  for (const auto& n : manifest_names()) have.insert(n);
  for (const char* n : {"dsv4_stock", "dsv4_base_fp8", "dsv4_nvfp4_current", "dsv4_nvfp4_early",
                        "dsv4_bf16", "kimi_compressed_tensors", "gptq", "awq", "gpt_oss_mxfp4"})
    EXPECT_TRUE(have.count(n)) << n;
}

TEST(Fixtures, MatchManifests) {
  for (const auto& name : manifest_names()) {
    SCOPED_TRACE(name);
    auto manifest = read_json_file(kFixtures + "/manifests/" + name + ".json");
    auto ck = Checkpoint::open(kFixtures + "/" + name);
    const auto& expected = manifest.at("tensors");
    ASSERT_EQ(ck->tensors().size(), expected.size());
    EXPECT_EQ(ck->total_bytes(), manifest.at("total_size").get<uint64_t>());
    if (ck->shards().size() > 1) {
      ASSERT_TRUE(ck->index_total_size().has_value());
      EXPECT_EQ(*ck->index_total_size(), ck->total_bytes());
    }
    for (const TensorInfo* t : ck->tensors()) {
      ASSERT_TRUE(expected.contains(t->name)) << t->name;
      const auto& e = expected.at(t->name);  // [dtype, shape, shard, fnv1a64]
      EXPECT_EQ(dtype_name(t->dtype), e[0].get<std::string>()) << t->name;
      EXPECT_EQ(t->shape, e[1].get<std::vector<int64_t>>()) << t->name;
      EXPECT_EQ(fs::path(t->file).filename().string(), e[2].get<std::string>()) << t->name;
      EXPECT_EQ(fnv1a64(t->data, t->nbytes), e[3].get<std::string>()) << t->name;
    }
  }
}

// Facts about the DSV4 fixtures taken from checkpoints.md, checked on the files.
TEST(Fixtures, Dsv4Metadata) {
  auto stock = Checkpoint::open(kFixtures + "/dsv4_stock");
  const auto& c = stock->config();
  EXPECT_EQ(c.at("architectures")[0], "DeepseekV4ForCausalLM");
  EXPECT_EQ(c.at("model_type"), "deepseek_v4");
  EXPECT_EQ(c.at("expert_dtype"), "fp4");
  const auto& q = c.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "fp8");
  EXPECT_EQ(q.at("fmt"), "e4m3");
  EXPECT_EQ(q.at("activation_scheme"), "dynamic");
  EXPECT_EQ(q.at("scale_fmt"), "ue8m0");
  EXPECT_EQ(q.at("weight_block_size"), nlohmann::json::array({128, 128}));
  EXPECT_EQ(stock->shards().size(), 2u);
  EXPECT_EQ(stock->get("layers.0.ffn.experts.0.w1.weight").dtype, DType::I8);
  EXPECT_EQ(stock->get("layers.0.ffn.experts.0.w1.scale").dtype, DType::F8_E8M0);
  EXPECT_EQ(stock->get("layers.0.ffn.gate.tid2eid").dtype, DType::I64);
  EXPECT_EQ(stock->get("layers.1.ffn.gate.bias").dtype, DType::F32);
  EXPECT_EQ(stock->get("mtp.0.e_proj.scale").dtype, DType::F8_E8M0);
  // FP8 scale shape is ceil(out/128) x ceil(in/128): wq_b is [256, 16].
  EXPECT_EQ(stock->get("layers.0.attn.wq_b.scale").shape, (std::vector<int64_t>{2, 1}));

  EXPECT_EQ(Checkpoint::open(kFixtures + "/dsv4_base_fp8")->config().at("expert_dtype"), "fp8");

  auto cur = Checkpoint::open(kFixtures + "/dsv4_nvfp4_current");
  ASSERT_NE(cur->hf_quant_config(), nullptr);
  const auto& hq = cur->hf_quant_config()->at("quantization");
  EXPECT_EQ(cur->hf_quant_config()->at("producer").at("name"), "modelopt");
  EXPECT_EQ(hq.at("quant_algo"), "MIXED_PRECISION");
  EXPECT_EQ(hq.at("quantized_layers").at("layers.0.ffn.experts").at("quant_algo"), "NVFP4");
  const auto& cq = cur->config().at("quantization_config");
  EXPECT_EQ(cq.at("quant_method"), "fp8");
  EXPECT_EQ(cq.at("moe_quant_algo"), "NVFP4");
  EXPECT_EQ(cq.at("group_size"), 16);

  auto early = Checkpoint::open(kFixtures + "/dsv4_nvfp4_early");
  ASSERT_NE(early->hf_quant_config(), nullptr);
  const auto& eq = early->hf_quant_config()->at("quantization");
  EXPECT_TRUE(eq.at("quant_algo").is_null());
  EXPECT_EQ(eq.at("quantized_layers").at("layers.0.ffn.experts.0.w1").at("awq_block_size"), 16);
  EXPECT_FALSE(early->config().contains("quantization_config"));

  auto bf = Checkpoint::open(kFixtures + "/dsv4_bf16");
  EXPECT_FALSE(bf->config().contains("quantization_config"));
  EXPECT_FALSE(bf->config().contains("expert_dtype"));
  for (const TensorInfo* t : bf->tensors())
    EXPECT_TRUE(t->dtype == DType::BF16 || t->dtype == DType::F32 || t->dtype == DType::I64) << t->name;
}

// The NVFP4 fixtures carry the stock FP4 codes byte for byte (NVIDIA's cast
// is lossless), w1/w3 share weight_scale_2 and input_scale, and the MTP
// experts stay MXFP4.
TEST(Fixtures, Nvfp4SharesStockCodes) {
  auto stock = Checkpoint::open(kFixtures + "/dsv4_stock");
  for (const char* dir : {"/dsv4_nvfp4_current", "/dsv4_nvfp4_early"}) {
    auto nv = Checkpoint::open(kFixtures + dir);
    int experts = 0;
    for (const TensorInfo* t : nv->tensors()) {
      if (t->dtype != DType::U8) continue;
      const TensorInfo& s = stock->get(t->name);
      ASSERT_EQ(s.nbytes, t->nbytes);
      EXPECT_EQ(std::memcmp(s.data, t->data, t->nbytes), 0) << t->name;
      std::string base = t->name.substr(0, t->name.size() - std::string(".weight").size());
      const TensorInfo& bs = nv->get(base + ".weight_scale");
      EXPECT_EQ(bs.dtype, DType::F8_E4M3);
      EXPECT_EQ(bs.shape, (std::vector<int64_t>{t->shape[0], t->shape[1] * 2 / 16}));
      EXPECT_EQ(nv->get(base + ".weight_scale_2").numel(), 1);
      EXPECT_EQ(nv->find(base + ".scale"), nullptr);
      ++experts;
    }
    EXPECT_EQ(experts, 3 * 3 * 4);  // 3 layers x 4 experts x w1/w2/w3
    const auto& w1 = nv->get("layers.1.ffn.experts.2.w1.weight_scale_2");
    const auto& w3 = nv->get("layers.1.ffn.experts.2.w3.weight_scale_2");
    EXPECT_EQ(std::memcmp(w1.data, w3.data, 4), 0);
    EXPECT_EQ(std::memcmp(nv->get("layers.1.ffn.experts.2.w1.input_scale").data,
                          nv->get("layers.1.ffn.experts.2.w3.input_scale").data, 4), 0);
    EXPECT_EQ(nv->get("mtp.0.ffn.experts.0.w1.weight").dtype, DType::I8);
    EXPECT_EQ(nv->get("mtp.0.ffn.experts.0.w1.scale").dtype, DType::F8_E8M0);
  }
}

}  // namespace
}  // namespace nibble
