// Load-time validation: a checkpoint that contradicts its config, misses a
// tensor or names an unknown architecture fails with a nibble::Error naming
// the tensor / field; bad token ids fail without touching the state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "scratch_model.h"
#include "runtime/session.h"
#include "util/error.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::ScratchModel;

// Runs load_model and returns the error message ("" if it loaded).
std::string load_error(const std::string& path) {
  try {
    load_model(path, test::test_load_options());
    return "";
  } catch (const Error& e) {
    if (std::getenv("NIBBLE_TEST_VERBOSE")) std::printf("  error: %s\n", e.what());
    return e.what();
  }
}

TEST(DeepseekV4Errors, UnmodifiedScratchCopyLoads) {
  ScratchModel m;
  EXPECT_EQ(load_error(m.path()), "");
}

// Scale codes that are NaN: the SIMD kernels widen them with bit moves and
// would compute with a finite number, so binding refuses them, naming the
// tensor and the element; LoadOptions::skip_weight_check loads anyway.
TEST(DeepseekV4Errors, NanScaleCodesAreRefusedAtLoad) {
  struct Case {
    const char* fixture;
    const char* tensor;    // the scale tensor patched
    uint64_t offset;       // byte offset of the element patched
    std::string code;      // the bytes written
    std::string expected;  // the error's text
  };
  float nan = std::nanf("");
  std::string nan_bytes(4, '\0');
  std::memcpy(nan_bytes.data(), &nan, 4);
  const Case cases[] = {
      // [160, 3] UE8M0 scales: element [7, 2] is byte 7 * 3 + 2.
      {"flash_tiny_stock", "layers.0.ffn.experts.1.w2.scale", 7 * 3 + 2, "\xff",
       "tensor layers.0.ffn.experts.1.w2: MXFP4 scale [7, 2] is the UE8M0 NaN code 0xFF"},
      // [1, 2] UE8M0 tile scales of an FP8 block-128 projection.
      {"flash_tiny_stock", "layers.1.attn.wq_a.scale", 1, "\xff",
       "tensor layers.1.attn.wq_a: FP8 tile scale [0, 1] is the UE8M0 NaN code 0xFF"},
      // [96, 4] E4M3 scales: element [5, 3] is byte 5 * 4 + 3; 0x7F and 0xFF are NaN.
      {"flash_tiny_nvfp4", "layers.0.ffn.experts.1.w2.weight_scale", 5 * 4 + 3, "\x7f",
       "tensor layers.0.ffn.experts.1.w2: NVFP4 scale [5, 3] is an E4M3 NaN code (0x7F)"},
      {"flash_tiny_nvfp4", "layers.0.ffn.experts.1.w2.weight_scale", 0, "\xff",
       "tensor layers.0.ffn.experts.1.w2: NVFP4 scale [0, 0] is an E4M3 NaN code (0xFF)"},
      {"flash_tiny_nvfp4", "layers.0.ffn.experts.1.w2.weight_scale_2", 0, nan_bytes,
       "tensor layers.0.ffn.experts.1.w2: NVFP4 global scale nan is not a positive finite number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    ScratchModel m(c.fixture);
    EXPECT_EQ(load_error(m.path()), "");
    m.patch_tensor(c.tensor, c.offset, c.code);
    std::string err = load_error(m.path());
    EXPECT_NE(err.find(c.expected), std::string::npos) << err;
    LoadOptions skip = test::test_load_options();
    skip.skip_weight_check = true;
    EXPECT_NO_THROW(load_model(m.path(), skip));
  }
}

TEST(DeepseekV4Errors, MissingTensorIsNamed) {
  ScratchModel m;
  m.drop_tensor("layers.1.attn.indexer.weights_proj.weight");
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.1.attn.indexer.weights_proj.weight is missing"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, MissingExpertIsNamed) {
  ScratchModel m;
  m.drop_tensor("layers.0.ffn.experts.2.w3.weight");
  m.drop_tensor("layers.0.ffn.experts.2.w3.scale");
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.0.ffn.experts.2.w3.weight is missing"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, ShapeContradictingConfigNamesTensorAndField) {
  ScratchModel m;
  m.config["q_lora_rank"] = 48;
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.0.attn.wq_a.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("q_lora_rank"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, HeadDimContradictionIsNamed) {
  ScratchModel m;
  m.config["head_dim"] = 16;
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("head_dim"), std::string::npos) << err;
  EXPECT_NE(err.find("layers.0.attn."), std::string::npos) << err;
}

TEST(DeepseekV4Errors, HashLayerWithoutTableIsNamed) {
  ScratchModel m;
  m.config["num_hash_layers"] = 1;  // the checkpoint has no tid2eid
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.0.ffn.gate.tid2eid is missing"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, LayerScheduleContradictionIsNamed) {
  ScratchModel m;
  m.config["compress_ratios"] = {4, 4};  // layer 0 is HCA in the checkpoint
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.0.attn.compressor.wkv.weight"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, BadCompressRatioIsNamed) {
  ScratchModel m;
  m.config["compress_ratios"] = {128, 5};
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("compress_ratios\"[1]"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, ShortScheduleIsNamed) {
  ScratchModel m;
  m.config["compress_ratios"] = {128};
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("compress_ratios"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, WrongFieldTypeIsNamed) {
  ScratchModel m;
  m.config["hc_mult"] = "two";
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("\"hc_mult\""), std::string::npos) << err;
}

TEST(DeepseekV4Errors, SeveralKvHeadsRejected) {
  ScratchModel m;
  m.config["num_key_value_heads"] = 2;
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("num_key_value_heads"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, UnknownArchitectureIsNamed) {
  ScratchModel m;
  m.config["architectures"] = {"LlamaForCausalLM"};
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;
  EXPECT_NE(err.find("DeepseekV4ForCausalLM"), std::string::npos) << err;  // lists what is supported
}

TEST(DeepseekV4Errors, MissingArchitectureIsNamed) {
  ScratchModel m;
  m.config.erase("architectures");
  m.write_config();
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("architectures"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, MissingFolderIsNamed) {
  std::string err = load_error("/nonexistent/nibble/model");
  EXPECT_NE(err.find("/nonexistent/nibble/model"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, MissingMtpTensorIsNamed) {
  // An FP8 matrix without its scales is refused by the planner for every
  // tensor, MTP included (a missing or misshapen MTP tensor the planner can
  // read only turns speculation off: deepseek_v4_mtp_test.cpp).
  ScratchModel m("flash_tiny_stock");  // sharded, ships mtp.0.*
  m.drop_tensor("mtp.0.h_proj.scale");
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("mtp.0.h_proj"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, MissingShardedTensorIsNamed) {
  ScratchModel m("flash_tiny_nvfp4");
  m.drop_tensor("layers.3.attn.indexer.compressor.ape");
  std::string err = load_error(m.path());
  EXPECT_NE(err.find("layers.3.attn.indexer.compressor.ape is missing"), std::string::npos) << err;
}

TEST(DeepseekV4Errors, CheckpointWithoutMtpLoads) {
  // HF ignores mtp.*; a checkpoint without them still runs (nothing to validate).
  ScratchModel m("flash_tiny_stock");
  std::ifstream in(test::fixture_dir("flash_tiny_stock") + "/model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it)
    if (it.key().rfind("mtp.", 0) == 0) m.drop_tensor(it.key());
  EXPECT_EQ(load_error(m.path()), "");
}

TEST(DeepseekV4Errors, BadTokenLeavesStateUntouched) {
  auto model = load_model(test::fixture_dir("hf_tiny_fp8experts"), test::test_load_options());
  Session s(*model);
  s.prefill(std::vector<int32_t>{0, 5, 7});
  const std::vector<int32_t> bad = {3, int32_t(model->vocab_size())};
  try {
    s.prefill(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.position(), 3);
  EXPECT_THROW(s.decode(-1), Error);
  EXPECT_THROW(s.prefill(std::vector<int32_t>{}), Error);
  EXPECT_EQ(s.position(), 3);
}

TEST(DeepseekV4Errors, StateOfAnotherModelRejected) {
  auto a = load_model(test::fixture_dir("hf_tiny_fp8experts"), test::test_load_options());
  auto b = load_model(test::fixture_dir("hf_tiny_fp8experts"), test::test_load_options());
  auto st = a->new_state();
  std::vector<float> logits(size_t(b->vocab_size()));
  const std::vector<int32_t> toks = {1};
  EXPECT_THROW(b->forward(*st, toks, logits.data(), false), Error);
}

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

// LoadOptions::on_progress (the load progress bar): calls never go back,
// and the last reports every byte of the plan's groups as bound.
TEST(DeepseekV4Load, ProgressReachesThePlansBytes) {
  LoadOptions opt = test::test_load_options("auto");
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  opt.on_progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  auto m = load_model(test::fixture_dir("flash_tiny_stock"), opt);
  uint64_t plan_bytes = 0;
  for (const GroupPlan& g : m->plan().groups) plan_bytes += g.bytes;
  ASSERT_GT(calls.size(), 10u);  // one per weight matrix, then the end
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, plan_bytes);
  }
  EXPECT_EQ(calls.back().first, plan_bytes);
  EXPECT_LT(calls[calls.size() - 2].first, plan_bytes);  // norms etc. are not matrices
}

}  // namespace
}  // namespace nibble
