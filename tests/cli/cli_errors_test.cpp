// The command line on bad input: every broken checkpoint gives exit status 1
// and a message naming the file (and the tensor); nothing crashes (these
// tests also run under ASan + UBSan).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"

namespace nibble::testing {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A tiny valid DeepSeek-V4-style folder: embed, one FP8 block weight, one
// MXFP4 expert, split over two shards with an index.
void write_good_model(const TempDir& dir) {
  write_safetensors(dir.str("model-00001-of-00002.safetensors"),
                    {random_tensor("embed.weight", "BF16", {64, 32}, 1),
                     random_tensor("layers.0.attn.wq_a.weight", "F8_E4M3", {16, 32}, 2),
                     random_tensor("layers.0.attn.wq_a.scale", "F8_E8M0", {1, 1}, 3)});
  write_safetensors(dir.str("model-00002-of-00002.safetensors"),
                    {random_tensor("layers.0.ffn.experts.0.w1.weight", "I8", {8, 16}, 4),
                     random_tensor("layers.0.ffn.experts.0.w1.scale", "F8_E8M0", {8, 1}, 5)});
  write_text(dir.str("model.safetensors.index.json"), R"({"metadata": {"total_size": 0}, "weight_map": {
      "embed.weight": "model-00001-of-00002.safetensors",
      "layers.0.attn.wq_a.weight": "model-00001-of-00002.safetensors",
      "layers.0.attn.wq_a.scale": "model-00001-of-00002.safetensors",
      "layers.0.ffn.experts.0.w1.weight": "model-00002-of-00002.safetensors",
      "layers.0.ffn.experts.0.w1.scale": "model-00002-of-00002.safetensors"}})");
  write_text(dir.str("config.json"), R"({"architectures": ["DeepseekV4ForCausalLM"], "hidden_size": 32,
      "vocab_size": 64, "num_hidden_layers": 1, "n_routed_experts": 1, "num_experts_per_tok": 1,
      "moe_intermediate_size": 8, "expert_dtype": "fp4",
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
}

void expect_clean_failure(const RunResult& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "error:")) << r.err;
  EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
  EXPECT_FALSE(contains(r.err, "Sanitizer")) << r.err;
  for (const auto& p : parts) EXPECT_TRUE(contains(r.err, p)) << "missing '" << p << "' in: " << r.err;
}

TEST(CliErrors, GoodModelExplains) {
  TempDir dir;
  write_good_model(dir);
  RunResult r = run_nibble({"explain", dir.str(), "--bandwidth", "10"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "routed_experts")) << r.out;
}

TEST(CliErrors, TruncatedShard) {
  TempDir dir;
  write_good_model(dir);
  fs::path shard = dir.path() / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 5);
  expect_clean_failure(run_nibble({"explain", dir.str(), "--bandwidth", "10"}),
                       {"model-00002-of-00002.safetensors", "layers.0.ffn.experts.0.w1.scale"});
}

TEST(CliErrors, GarbageHeader) {
  TempDir dir;
  write_good_model(dir);
  write_text(dir.str("model-00001-of-00002.safetensors"), std::string("\x20\x00\x00\x00\x00\x00\x00\x00", 8) +
                                                              "{this is not json at all.......}");
  expect_clean_failure(run_nibble({"inspect", dir.str()}), {"model-00001-of-00002.safetensors", "JSON"});
}

TEST(CliErrors, AbsurdHeaderLength) {
  TempDir dir;
  write_text(dir.str("x.safetensors"), std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  expect_clean_failure(run_nibble({"inspect", dir.str("x.safetensors")}), {"x.safetensors", "header length"});
}

TEST(CliErrors, MissingShard) {
  TempDir dir;
  write_good_model(dir);
  fs::remove(dir.path() / "model-00002-of-00002.safetensors");
  expect_clean_failure(run_nibble({"explain", dir.str(), "--bandwidth", "10"}),
                       {"model-00002-of-00002.safetensors", "missing"});
}

TEST(CliErrors, OverlappingOffsets) {
  TempDir dir;
  auto a = random_tensor("a", "F32", {4}, 1), b = random_tensor("b", "F32", {4}, 2);
  write_safetensors(dir.str("m.safetensors"), {a, b},
                    R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})");
  expect_clean_failure(run_nibble({"inspect", dir.str("m.safetensors")}), {"m.safetensors", "overlap", "a", "b"});
}

TEST(CliErrors, SizeDisagreesWithShape) {
  TempDir dir;
  auto a = random_tensor("w", "BF16", {4, 4}, 1);
  write_safetensors(dir.str("m.safetensors"), {a},
                    R"({"w": {"dtype": "BF16", "shape": [4, 5], "data_offsets": [0, 32]}})");
  expect_clean_failure(run_nibble({"inspect", dir.str("m.safetensors")}), {"m.safetensors", "tensor w", "needs 40"});
}

TEST(CliErrors, ConfigContradictsTensors) {
  TempDir dir;
  write_good_model(dir);
  write_text(dir.str("config.json"), R"({"architectures": ["DeepseekV4ForCausalLM"], "hidden_size": 4096,
      "vocab_size": 64, "num_hidden_layers": 1, "n_routed_experts": 1, "num_experts_per_tok": 1})");
  expect_clean_failure(run_nibble({"explain", dir.str(), "--bandwidth", "10"}),
                       {"config.json", "hidden_size", "embed.weight"});
}

TEST(CliErrors, ScaleWithTheWrongShape) {
  TempDir dir;
  write_safetensors(dir.str("m.safetensors"), {random_tensor("e.w1.weight", "I8", {8, 16}, 1),
                                               random_tensor("e.w1.scale", "F8_E8M0", {8, 2}, 2)});
  expect_clean_failure(run_nibble({"inspect", dir.str("m.safetensors")}), {"e.w1.scale", "[8, 1]"});
}

TEST(CliErrors, UnsupportedMethodIsNamed) {
  TempDir dir;
  write_safetensors(dir.str("model.safetensors"), {random_tensor("model.layers.0.mlp.down_proj.qweight", "I32", {4, 8}, 1),
                                                   random_tensor("model.layers.0.mlp.down_proj.scales", "F16", {1, 8}, 2)});
  write_text(dir.str("config.json"), R"({"architectures": ["LlamaForCausalLM"],
      "quantization_config": {"quant_method": "gptq", "bits": 4}})");
  expect_clean_failure(run_nibble({"explain", dir.str(), "--bandwidth", "10"}), {"gptq", "not supported"});
  // inspect still lists it, marking the tensors unsupported.
  RunResult r = run_nibble({"inspect", dir.str()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "unsupported")) << r.out;
}

TEST(CliErrors, NoSuchPath) {
  expect_clean_failure(run_nibble({"inspect", "/nonexistent/nibble/model"}), {"/nonexistent/nibble/model"});
}

TEST(CliFlags, HelpForEveryCommand) {
  RunResult top = run_nibble({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* cmd : {"inspect", "explain"}) {
    EXPECT_TRUE(contains(top.out, cmd));
    RunResult r = run_nibble({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_TRUE(contains(r.out, std::string("usage: nibble ") + cmd)) << r.out;
  }
}

// Bad usage exits 2 (what every --help promises), naming the flag.
void expect_usage_error(const RunResult& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "error:")) << r.err;
  for (const auto& p : parts) EXPECT_TRUE(contains(r.err, p)) << "missing '" << p << "' in: " << r.err;
}

TEST(CliFlags, BadFlagsAreNamed) {
  TempDir dir;
  write_good_model(dir);
  expect_usage_error(run_nibble({"explain", dir.str(), "--frobnicate"}), {"--frobnicate"});
  expect_usage_error(run_nibble({"explain", dir.str(), "--batch", "zero"}), {"--batch", "zero"});
  expect_usage_error(run_nibble({"explain", dir.str(), "--device", "sm_75"}), {"sm_75", "cpu-avx2"});
  expect_usage_error(run_nibble({"explain", dir.str(), "--bandwidth", "10", "--moe-backend", "warp_drive"}),
                     {"--moe-backend", "warp_drive", "known"});
  expect_usage_error(run_nibble({"explain"}), {"MODEL_DIR"});
  RunResult unknown = run_nibble({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
}

TEST(CliFlags, ForcedBackendThatCannotRunFails) {
  TempDir dir;
  write_good_model(dir);
  // cpu_ref cannot run on a CUDA device: an error, not a silent fallback.
  expect_clean_failure(run_nibble({"explain", dir.str(), "--device", "sm_120", "--moe-backend", "cpu_ref"}),
                       {"--moe-backend cpu_ref", "sm_120"});
}

}  // namespace
}  // namespace nibble::testing
