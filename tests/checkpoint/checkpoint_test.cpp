// Checkpoint::open on hand-built folders: the index is checked against the
// shards in both directions, and every inconsistency is an error naming the
// file and tensor at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "test_util.h"

namespace nibble {
namespace {

using test::expect_error;
using test::ScratchDir;

// A shard holding U8 [4] tensors with the given names, back to back; tensor
// i's bytes are all equal to `fill + i`.
void write_shard(const std::string& path, const std::vector<std::string>& names, char fill = 'a') {
  std::string header = "{";
  std::string data;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) header += ",";
    header += "\"" + names[i] + "\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    data += std::string(4, char(fill + i));
  }
  header += "}";
  test::write_safetensors_raw(path, header, data);
}

// {"metadata": {"total_size": ...}, "weight_map": {...}} from (tensor, shard) pairs.
std::string index_json(const std::vector<std::pair<std::string, std::string>>& entries,
                       const std::string& total_size = "16") {
  std::string s = "{\"metadata\": {\"total_size\": " + total_size + "}, \"weight_map\": {";
  for (size_t i = 0; i < entries.size(); ++i)
    s += (i ? ", \"" : "\"") + entries[i].first + "\": \"" + entries[i].second + "\"";
  return s + "}}";
}

// Two shards, four tensors, a consistent index and configs.
struct GoodFolder {
  ScratchDir dir;
  GoodFolder() {
    write_shard(dir.file("model-00001-of-00002.safetensors"), {"a.weight", "b.weight"}, 'a');
    write_shard(dir.file("model-00002-of-00002.safetensors"), {"c.weight", "d.weight"}, 'c');
    test::write_bytes(dir.file("config.json"), R"({"model_type": "toy", "hidden_size": 4})");
    test::write_bytes(dir.file("model.safetensors.index.json"),
                      index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                                  {"b.weight", "model-00001-of-00002.safetensors"},
                                  {"c.weight", "model-00002-of-00002.safetensors"},
                                  {"d.weight", "model-00002-of-00002.safetensors"}}));
  }
  void index(const std::string& text) { test::write_bytes(dir.file("model.safetensors.index.json"), text); }
};

TEST(Checkpoint, OpensShardedFolder) {
  GoodFolder g;
  auto ck = Checkpoint::open(g.dir.path());
  EXPECT_TRUE(ck->is_folder());
  ASSERT_EQ(ck->tensors().size(), 4u);
  EXPECT_EQ(ck->shards().size(), 2u);
  EXPECT_EQ(ck->total_bytes(), 16u);
  ASSERT_TRUE(ck->index_total_size().has_value());
  EXPECT_EQ(*ck->index_total_size(), 16u);
  EXPECT_EQ(ck->config().at("model_type"), "toy");
  EXPECT_EQ(ck->hf_quant_config(), nullptr);
  EXPECT_EQ(ck->generation_config(), nullptr);
  // Sorted by name, data from the right shard.
  EXPECT_EQ(ck->tensors()[2]->name, "c.weight");
  EXPECT_EQ(ck->get("d.weight").data[0], 'd');
  EXPECT_EQ(std::filesystem::path(ck->get("d.weight").file).filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(ck->find("nope"), nullptr);
  expect_error([&] { ck->get("nope"); }, {g.dir.path(), "missing tensor nope"});
  EXPECT_EQ(ck->file_path("tokenizer.json"), g.dir.file("tokenizer.json"));
}

TEST(Checkpoint, OpensSingleFileAndPlainFolder) {
  ScratchDir dir;
  write_shard(dir.file("model.safetensors"), {"x", "y"});
  auto file = Checkpoint::open(dir.file("model.safetensors"));
  EXPECT_FALSE(file->is_folder());
  EXPECT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->file_path("config.json"), dir.file("config.json"));
  auto folder = Checkpoint::open(dir.path());
  EXPECT_TRUE(folder->is_folder());
  EXPECT_EQ(folder->tensors().size(), 2u);
  EXPECT_FALSE(folder->index_total_size().has_value());
  EXPECT_TRUE(folder->config().is_object());
  EXPECT_TRUE(folder->config().empty());
}

TEST(Checkpoint, FolderWithoutIndexTakesEverySafetensorsFile) {
  ScratchDir dir;
  write_shard(dir.file("b.safetensors"), {"t2"});
  write_shard(dir.file("a.safetensors"), {"t1"});
  test::write_bytes(dir.file("notes.txt"), "not a shard");
  auto ck = Checkpoint::open(dir.path());
  ASSERT_EQ(ck->shards().size(), 2u);
  EXPECT_EQ(ck->shards()[0]->path(), dir.file("a.safetensors"));  // name order
}

TEST(Checkpoint, MissingPath) {
  expect_error([] { Checkpoint::open("/nonexistent/nibble/model"); },
               {"/nonexistent/nibble/model", "no such file or folder"});
}

TEST(Checkpoint, EmptyFolder) {
  ScratchDir dir;
  expect_error([&] { Checkpoint::open(dir.path()); }, {dir.path(), "no .safetensors files"});
}

TEST(Checkpoint, MissingShard) {
  GoodFolder g;
  std::filesystem::remove(g.dir.file("model-00002-of-00002.safetensors"));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model.safetensors.index.json", "names shard model-00002-of-00002.safetensors",
                "missing"});
}

TEST(Checkpoint, TensorInTwoShards) {
  GoodFolder g;
  write_shard(g.dir.file("model-00002-of-00002.safetensors"), {"c.weight", "a.weight"});
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"tensor a.weight appears in two shards", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"});
  // Without an index too.
  ScratchDir dir;
  write_shard(dir.file("x.safetensors"), {"w"});
  write_shard(dir.file("y.safetensors"), {"w"});
  expect_error([&] { Checkpoint::open(dir.path()); }, {"tensor w appears in two shards"});
}

TEST(Checkpoint, IndexListsTensorTwice) {
  GoodFolder g;
  g.index(index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                      {"b.weight", "model-00001-of-00002.safetensors"},
                      {"c.weight", "model-00002-of-00002.safetensors"},
                      {"d.weight", "model-00002-of-00002.safetensors"},
                      {"a.weight", "model-00002-of-00002.safetensors"}}));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model.safetensors.index.json", "duplicate key \"a.weight\""});
}

TEST(Checkpoint, IndexPointsAtWrongShard) {
  GoodFolder g;
  g.index(index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                      {"b.weight", "model-00001-of-00002.safetensors"},
                      {"c.weight", "model-00001-of-00002.safetensors"},
                      {"d.weight", "model-00002-of-00002.safetensors"}}));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model.safetensors.index.json", "tensor c.weight is listed in shard model-00001",
                "stored in", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, IndexListsAbsentTensor) {
  GoodFolder g;
  g.index(index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                      {"b.weight", "model-00001-of-00002.safetensors"},
                      {"c.weight", "model-00002-of-00002.safetensors"},
                      {"d.weight", "model-00002-of-00002.safetensors"},
                      {"e.weight", "model-00002-of-00002.safetensors"}}));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model.safetensors.index.json", "tensor e.weight", "not found there"});
}

TEST(Checkpoint, TensorMissingFromIndex) {
  GoodFolder g;
  g.index(index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                      {"b.weight", "model-00001-of-00002.safetensors"},
                      {"c.weight", "model-00002-of-00002.safetensors"}}));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model-00002-of-00002.safetensors", "tensor d.weight is not listed in"});
}

TEST(Checkpoint, MalformedIndex) {
  GoodFolder g;
  g.index("{\"weight_map\": ");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"model.safetensors.index.json", "not valid JSON"});
  g.index("[]");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"model.safetensors.index.json", "not a JSON object"});
  g.index(R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"missing \"weight_map\" object"});
  g.index(R"({"weight_map": {}})");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"\"weight_map\" lists no tensors"});
  g.index(R"({"weight_map": {"a.weight": 1}})");
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"weight_map entry a.weight is a JSON number, not a file name"});
  for (const char* shard : {"../model-00001-of-00002.safetensors", "..", "", "sub/x.safetensors"}) {
    g.index(index_json({{"a.weight", shard}}));
    expect_error([&] { Checkpoint::open(g.dir.path()); },
                 {"weight_map entry a.weight names an invalid shard"});
  }
}

TEST(Checkpoint, TotalSizeIsInformational) {
  GoodFolder g;
  g.index(index_json({{"a.weight", "model-00001-of-00002.safetensors"},
                      {"b.weight", "model-00001-of-00002.safetensors"},
                      {"c.weight", "model-00002-of-00002.safetensors"},
                      {"d.weight", "model-00002-of-00002.safetensors"}},
                     "\"16\""));
  auto ck = Checkpoint::open(g.dir.path());
  EXPECT_FALSE(ck->index_total_size().has_value());  // a string is ignored
  EXPECT_EQ(ck->total_bytes(), 16u);
}

TEST(Checkpoint, BadShardInsideFolderNamesIt) {
  GoodFolder g;
  test::write_safetensors_raw(g.dir.file("model-00002-of-00002.safetensors"),
                              R"({"c.weight": {"dtype": "U8", "shape": [4], "data_offsets": [0, 8]}})",
                              "12345678");
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model-00002-of-00002.safetensors", "tensor c.weight", "holds 8 bytes"});
}

TEST(Checkpoint, ConfigFilesMustBeObjects) {
  GoodFolder g;
  test::write_bytes(g.dir.file("config.json"), "{\"model_type\": ");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"config.json", "not valid JSON"});
  test::write_bytes(g.dir.file("config.json"), "[1, 2]");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"config.json", "not an object"});
  test::write_bytes(g.dir.file("config.json"), "{}");
  test::write_bytes(g.dir.file("hf_quant_config.json"), "\"NVFP4\"");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"hf_quant_config.json", "not an object"});
  test::write_bytes(g.dir.file("hf_quant_config.json"), R"({"quantization": {"quant_algo": "NVFP4"}})");
  test::write_bytes(g.dir.file("generation_config.json"), "null");
  expect_error([&] { Checkpoint::open(g.dir.path()); }, {"generation_config.json", "not an object"});
  test::write_bytes(g.dir.file("generation_config.json"), R"({"temperature": 0.6})");
  auto ck = Checkpoint::open(g.dir.path());
  ASSERT_NE(ck->hf_quant_config(), nullptr);
  EXPECT_EQ(ck->hf_quant_config()->at("quantization").at("quant_algo"), "NVFP4");
  ASSERT_NE(ck->generation_config(), nullptr);
}

TEST(Checkpoint, ShardThatIsAFolder) {
  GoodFolder g;
  std::filesystem::remove(g.dir.file("model-00002-of-00002.safetensors"));
  std::filesystem::create_directory(g.dir.file("model-00002-of-00002.safetensors"));
  expect_error([&] { Checkpoint::open(g.dir.path()); },
               {"model-00002-of-00002.safetensors", "not a regular file"});
}

}  // namespace
}  // namespace nibble
