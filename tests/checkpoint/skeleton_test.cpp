// The full-size DeepSeek-V4-Flash skeleton: generated from the committed
// template into a temporary folder (46 sparse shards, real headers) and
// opened with Checkpoint, which validates every header and the index. The
// expected numbers are dsv4.md section 3's (69,187 tensors, 1,575 of them
// mtp.0.*, total_size 159,609,485,896) and the dtype counts of a published
// header audit of the real checkpoint.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/skeleton.h"
#include "test_util.h"

namespace nibble {
namespace {

using test::ScratchDir;

TEST(Skeleton, Dsv4FlashOpensWithRealTotals) {
  ScratchDir dir;
  SkeletonSummary sum = write_skeleton_checkpoint(dsv4_flash_skeleton_template(), dir.path());
  EXPECT_EQ(sum.shards, 46u);
  EXPECT_EQ(sum.tensors, 69187u);
  EXPECT_EQ(sum.total_size, 159609485896ull);
  std::map<std::string, size_t> audit = {{"BF16", 433}, {"F32", 417}, {"F8_E4M3", 375},
                                         {"F8_E8M0", 34167}, {"I64", 3}, {"I8", 33792}};
  EXPECT_EQ(sum.by_dtype, audit);

  auto ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck->shards().size(), 46u);
  ASSERT_EQ(ck->tensors().size(), 69187u);
  EXPECT_EQ(ck->total_bytes(), 159609485896ull);
  ASSERT_TRUE(ck->index_total_size().has_value());
  EXPECT_EQ(*ck->index_total_size(), 159609485896ull);
  size_t mtp = 0;
  for (const TensorInfo* t : ck->tensors()) mtp += t->name.rfind("mtp.0.", 0) == 0;
  EXPECT_EQ(mtp, 1575u);

  // Shapes and dtypes from dsv4.md's tables.
  auto expect = [&](const char* name, DType dtype, std::vector<int64_t> shape) {
    const TensorInfo& t = ck->get(name);
    EXPECT_EQ(t.dtype, dtype) << name;
    EXPECT_EQ(t.shape, shape) << name;
  };
  expect("embed.weight", DType::BF16, {129280, 4096});
  expect("head.weight", DType::BF16, {129280, 4096});
  expect("hc_head_fn", DType::F32, {4, 16384});
  expect("layers.0.ffn.gate.tid2eid", DType::I64, {129280, 6});
  expect("layers.3.ffn.gate.bias", DType::F32, {256});
  expect("layers.42.attn.wo_a.weight", DType::F8_E4M3, {8192, 4096});
  expect("layers.42.attn.wo_a.scale", DType::F8_E8M0, {64, 32});
  expect("layers.7.ffn.experts.255.w2.weight", DType::I8, {4096, 1024});
  expect("layers.7.ffn.experts.255.w2.scale", DType::F8_E8M0, {4096, 64});
  expect("layers.2.attn.indexer.compressor.ape", DType::F32, {4, 256});  // CSA
  expect("layers.3.attn.compressor.ape", DType::F32, {128, 512});        // HCA
  expect("mtp.0.h_proj.scale", DType::F8_E8M0, {32, 32});
  EXPECT_EQ(ck->find("layers.3.ffn.gate.tid2eid"), nullptr);  // hash layers are 0..2
  EXPECT_EQ(ck->find("layers.0.attn.compressor.ape"), nullptr);  // SWA
  EXPECT_EQ(ck->find("layers.43.attn_norm.weight"), nullptr);    // MTP is mtp.0.*

  EXPECT_EQ(ck->config().at("num_hidden_layers"), 43);
  EXPECT_EQ(ck->config().at("compress_ratios").size(), 44u);
  EXPECT_EQ(std::filesystem::path(ck->get("layers.0.attn.wq_a.weight").file).filename(),
            "model-00002-of-00046.safetensors");
  EXPECT_EQ(std::filesystem::path(ck->get("mtp.0.e_proj.weight").file).filename(),
            "model-00046-of-00046.safetensors");

  // Sparse: the 160 GB folder occupies only the headers' blocks.
  uint64_t allocated = 0;
  for (const auto& s : ck->shards()) {
    struct stat st {};
    ASSERT_EQ(::stat(s->path().c_str(), &st), 0);
    allocated += uint64_t(st.st_blocks) * 512;
  }
  EXPECT_LT(allocated, uint64_t(64) << 20);
  // Sparse data reads as zeros.
  const TensorInfo& w = ck->get("layers.20.ffn.experts.100.w1.weight");
  EXPECT_EQ(w.data[0], 0);
  EXPECT_EQ(w.data[w.nbytes - 1], 0);
}

// NVIDIA's NVFP4 re-quantization of the same checkpoint. Each of the
// 43 x 256 x 3 routed expert matrices of layers.* ([2048, 4096] or
// [4096, 2048]: 2^23 elements) keeps its packed FP4 bytes (I8 -> U8) and
// trades the UE8M0 scale (one byte per 32 elements) for an E4M3 weight_scale
// (one per 16) plus F32 weight_scale_2 and input_scale scalars: 2 tensors and
// 2^23 / 32 + 8 bytes more per matrix. The MTP experts stay MXFP4.
TEST(Skeleton, Dsv4FlashNvfp4Variants) {
  const uint64_t matrices = 43 * 256 * 3, elems = uint64_t(1) << 23;
  for (const char* variant : {"nvfp4_current", "nvfp4_early"}) {
    SCOPED_TRACE(variant);
    ScratchDir dir;
    SkeletonSummary sum = write_skeleton_checkpoint(dsv4_flash_skeleton_template(variant), dir.path());
    EXPECT_EQ(sum.shards, 46u);
    EXPECT_EQ(sum.tensors, 69187u + 2 * matrices);
    EXPECT_EQ(sum.total_size, 159609485896ull + matrices * (elems / 32 + 8));
    std::map<std::string, size_t> audit = {{"BF16", 433}, {"F32", 417 + 2 * matrices},
                                           {"F8_E4M3", 375 + matrices}, {"F8_E8M0", 34167 - matrices},
                                           {"I64", 3}, {"I8", 33792 - matrices}, {"U8", matrices}};
    EXPECT_EQ(sum.by_dtype, audit);
    auto ck = Checkpoint::open(dir.path());
    ASSERT_EQ(ck->tensors().size(), sum.tensors);
    EXPECT_EQ(ck->get("layers.7.ffn.experts.255.w2.weight").dtype, DType::U8);
    EXPECT_EQ(ck->get("layers.7.ffn.experts.255.w2.weight_scale").shape, (std::vector<int64_t>{4096, 128}));
    EXPECT_TRUE(ck->get("layers.7.ffn.experts.255.w2.weight_scale_2").shape.empty());
    EXPECT_EQ(ck->get("mtp.0.ffn.experts.3.w1.scale").dtype, DType::F8_E8M0);
    ASSERT_NE(ck->hf_quant_config(), nullptr);
    const auto& q = ck->hf_quant_config()->at("quantization");
    if (std::string(variant) == "nvfp4_early") {
      // The brace ranges of the template expand to one key per expert matrix.
      EXPECT_TRUE(q.at("quant_algo").is_null());
      EXPECT_EQ(q.at("quantized_layers").size(), matrices);
      EXPECT_EQ(q.at("quantized_layers").at("layers.42.ffn.experts.255.w3").at("quant_algo"), "NVFP4");
      EXPECT_EQ(q.at("exclude_modules").size(), 44u * 8 + 256 * 3 + 1);
      EXPECT_EQ(q.at("exclude_modules")[0], "layers.0.attn.wq_a");
      EXPECT_EQ(q.at("exclude_modules").back(), "head");
      EXPECT_FALSE(ck->config().contains("quantization_config"));
    } else {
      EXPECT_EQ(q.at("quant_algo"), "MIXED_PRECISION");
      EXPECT_EQ(q.at("quantized_layers").size(), 43u);
      EXPECT_EQ(ck->config().at("quantization_config").at("moe_quant_algo"), "NVFP4");
    }
  }
}

TEST(Skeleton, FilesAreBraceExpanded) {
  ScratchDir dir;
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s-{n:05}-of-{count:05}.safetensors",
    "config": {"model_type": "toy"},
    "templates": {"x": {"tensors": [["w", "F32", [1]]]}},
    "shards": [[{"prefix": "", "use": ["x"]}]],
    "files": {"q.json": {"k.{0..1}.{a,b}": 1, "lit{x}": [ "m{1..3}", "{y}", 7]}}})");
  write_skeleton_checkpoint(dir.file("t.json"), dir.file("ok"));
  auto ck = Checkpoint::open(dir.file("ok"));
  nlohmann::json q = read_json_file(dir.file("ok") + "/q.json");
  EXPECT_EQ(q, nlohmann::json::parse(R"({"k.0.a": 1, "k.0.b": 1, "k.1.a": 1, "k.1.b": 1,
                                         "lit{x}": ["m1", "m2", "m3", "{y}", 7]})"));
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s.safetensors", "config": {},
    "templates": {"x": {"tensors": [["w", "F32", [1]]]}}, "shards": [[{"prefix": "", "use": ["x"]}]],
    "files": {"q.json": {"k{1..2}": 1, "k1": 2}}})");
  test::expect_error([&] { write_skeleton_checkpoint(dir.file("t.json"), dir.file("bad")); },
                     {"files: q.json", "key k1 appears twice"});
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s.safetensors", "config": {},
    "templates": {"x": {"tensors": [["w", "F32", [1]]]}}, "shards": [[{"prefix": "", "use": ["x"]}]],
    "files": {"q.json": ["k{2..x}"]}})");
  test::expect_error([&] { write_skeleton_checkpoint(dir.file("t.json"), dir.file("bad2")); },
                     {"files: q.json", "bad range {2..x}"});
}

TEST(Skeleton, ConvenienceWrapperAndBadTemplates) {
  ScratchDir dir;
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s-{n:05}-of-{count:05}.safetensors",
    "config": {"model_type": "toy"},
    "templates": {"x": {"repeat": 2, "prefix": "e.{i}.", "tensors": [["w", "F8_E4M3", [2, 3]]]}},
    "shards": [[{"prefix": "a.", "use": ["x"]}], [{"prefix": "b.", "use": ["x", "x"]}]]})");
  test::expect_error([&] { write_skeleton_checkpoint(dir.file("t.json"), dir.file("out")); },
                     {"s-00002-of-00002.safetensors", "tensor b.e.0.w is declared twice"});
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s-{n:05}-of-{count:05}.safetensors",
    "config": {"model_type": "toy"},
    "templates": {"x": {"repeat": 2, "prefix": "e.{i}.", "tensors": [["w", "F8_E4M3", [2, 3]]]}},
    "shards": [[{"prefix": "a.", "use": ["x"]}], [{"prefix": "a.", "use": ["x"]}]]})");
  test::expect_error([&] { write_skeleton_checkpoint(dir.file("t.json"), dir.file("out2")); },
                     {"shard s-00002-of-00002.safetensors", "tensor a.e.0.w is already in shard s-00001"});
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s-{n:05}-of-{count:05}.safetensors",
    "config": {}, "templates": {"x": {"tensors": [["w", "F4", [2]]]}},
    "shards": [[{"prefix": "", "use": ["x"]}]]})");
  test::expect_error([&] { write_skeleton_checkpoint(dir.file("t.json"), dir.file("out3")); },
                     {"template x", "unknown dtype"});
  test::write_bytes(dir.file("t.json"), R"({"shard_name": "s-{n:05}-of-{count:05}.safetensors",
    "config": {"model_type": "toy"},
    "templates": {"x": {"repeat": 2, "prefix": "e.{i}.", "tensors": [["w", "F8_E4M3", [2, 3]]]}},
    "shards": [[{"prefix": "a.", "use": ["x"]}], [{"prefix": "b.", "use": ["x"]}]]})");
  auto sum = write_skeleton_checkpoint(dir.file("t.json"), dir.file("ok"));
  EXPECT_EQ(sum.tensors, 4u);
  EXPECT_EQ(sum.total_size, 24u);
  auto ck = Checkpoint::open(dir.file("ok"));
  EXPECT_EQ(ck->get("b.e.1.w").file, dir.file("ok") + "/s-00002-of-00002.safetensors");
  EXPECT_EQ(ck->config().at("model_type"), "toy");
}

}  // namespace
}  // namespace nibble
