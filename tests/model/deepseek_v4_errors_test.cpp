// Load-time validation: a checkpoint that contradicts its config, misses a
// tensor or names an unknown architecture fails with a nibble::Error naming
// the tensor / field; bad token ids fail without touching the state.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "runtime/session.h"
#include "util/error.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A scratch copy of the single-file fixture whose config and tensors a test may edit.
class ScratchModel {
 public:
  ScratchModel() {
    dir_ = fs::temp_directory_path() / ("nibble_dsv4_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path src = test::fixture_dir("hf_tiny_fp8experts");
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::copy_file(src / f, dir_ / f);
    std::ifstream in(dir_ / "config.json");
    config = json::parse(in);
  }
  ~ScratchModel() { fs::remove_all(dir_); }

  std::string path() const { return dir_.string(); }
  void write_config() const { std::ofstream(dir_ / "config.json") << config.dump(1); }

  // Rewrites model.safetensors without `name`.
  void drop_tensor(const std::string& name) const {
    const fs::path file = dir_ / "model.safetensors";
    std::ifstream in(file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    json header = json::parse(std::string(bytes.data() + 8, size_t(n)));
    ASSERT_TRUE(header.contains(name)) << name;
    header.erase(name);
    json out = json::object();
    std::string data;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        out[it.key()] = it.value();
        continue;
      }
      const auto begin = it.value()["data_offsets"][0].get<uint64_t>(), end = it.value()["data_offsets"][1].get<uint64_t>();
      json t = it.value();
      t["data_offsets"] = {data.size(), data.size() + (end - begin)};
      data.append(bytes.data() + 8 + n + begin, size_t(end - begin));
      out[it.key()] = t;
    }
    std::string h = out.dump();
    const uint64_t hn = h.size();
    std::ofstream o(file, std::ios::binary | std::ios::trunc);
    o.write(reinterpret_cast<const char*>(&hn), 8);
    o.write(h.data(), std::streamsize(h.size()));
    o.write(data.data(), std::streamsize(data.size()));
  }

  json config;

 private:
  fs::path dir_;
  static inline int counter_ = 0;
};

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
