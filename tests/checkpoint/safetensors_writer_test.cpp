// The streaming writer: bytes identical to the reference `safetensors`
// library (tests/fixtures/checkpoints/writer, written by
// tools/gen_checkpoint_fixtures.py), round trips through the reader with
// arbitrary chunking, and refuses every misuse without leaving a file.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "test_util.h"

namespace nibble {
namespace {

using test::expect_error;
using test::read_bytes;
using test::ScratchDir;

const std::string kWriterFixtures = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/checkpoints/writer";

// The tensors of tools/gen_checkpoint_fixtures.py's WRITER_TENSORS.
std::vector<TensorSpec> reference_specs() {
  return {
      {"layers.0.attn.wq_a.weight", DType::F8_E4M3, {4, 6}},
      {"layers.0.attn.wq_a.scale", DType::F8_E8M0, {1, 1}},
      {"layers.0.ffn.experts.0.w1.weight", DType::I8, {4, 3}},
      {"norm.weight", DType::BF16, {6}},
      {"hc_head_fn", DType::F32, {2, 3}},
      {"layers.0.ffn.gate.tid2eid", DType::I64, {3, 2}},
      {"odd_u8", DType::U8, {5}},
      {"f16", DType::F16, {3}},
      {"i32", DType::I32, {2}},
      {"u16", DType::U16, {1}},
      {"i16", DType::I16, {2}},
      {"u32", DType::U32, {1}},
      {"u64", DType::U64, {1}},
      {"f64", DType::F64, {1}},
      {"bool", DType::BOOL, {3}},
      {"e5m2", DType::F8_E5M2, {2}},
      {"empty", DType::F32, {0, 4}},
      {"scalar", DType::F32, {}},
      {"we\"ird\\name\n\ttab", DType::U8, {2}},
      {"\xc3\xbcn\xc3\xaf" "code.\xe6\xbc\xa2", DType::U8, {1}},  // "ünïcode.漢"
  };
}

// Same formula as writer_pattern() in the generator.
std::string pattern(const TensorSpec& t) {
  unsigned seed = 0;
  for (unsigned char c : t.name) seed += c;
  seed %= 251;
  std::string b(t.nbytes(), '\0');
  for (size_t j = 0; j < b.size(); ++j) {
    unsigned v = (seed + 131 * j) % 251;
    b[j] = char(t.dtype == DType::BOOL ? (v & 1) : v);
  }
  return b;
}

TEST(SafetensorsWriter, BytesMatchReferenceLibrary) {
  auto specs = reference_specs();
  sort_like_safetensors(specs);
  ScratchDir dir;
  std::string path = dir.file("out.safetensors");
  {
    SafetensorsWriter w(path, specs, {{"format", "pt"}});
    for (const auto& t : specs) {
      std::string b = pattern(t);
      w.write_tensor(t.name, b.data(), b.size());
    }
    EXPECT_EQ(w.current(), nullptr);
    w.finish();
  }
  std::string expected = read_bytes(kWriterFixtures + "/reference.safetensors");
  ASSERT_FALSE(expected.empty());
  std::string got = read_bytes(path);
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "first header bytes: " << got.substr(8, 200) << "\nexpected: "
                               << expected.substr(8, 200);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST(SafetensorsWriter, IndexMatchesTransformers) {
  ScratchDir dir;
  std::string path = dir.file("model.safetensors.index.json");
  write_safetensors_index(path, 159609485896ull,
                          {{"b.weight", "model-00002-of-00002.safetensors"},
                           {"a.weight", "model-00001-of-00002.safetensors"},
                           {"\xc3\xbcn\xc3\xaf" "code.\xe6\xbc\xa2", "model-00001-of-00002.safetensors"},
                           {"mtp.0.e_proj.scale", "model-00002-of-00002.safetensors"}});
  EXPECT_EQ(read_bytes(path), read_bytes(kWriterFixtures + "/reference.index.json"));
}

TEST(SafetensorsWriter, HeaderAlignmentAndOrder) {
  std::vector<TensorSpec> specs = {{"b", DType::U8, {3}}, {"a", DType::F32, {2}}, {"c", DType::I64, {1}}};
  sort_like_safetensors(specs);
  ASSERT_EQ(specs[0].name, "c");  // I64 first, then F32, then U8
  EXPECT_EQ(specs[1].name, "a");
  EXPECT_EQ(specs[2].name, "b");
  auto lay = plan_safetensors(specs, {}, "x");
  EXPECT_EQ(lay.header.size() % 8, 0u);
  EXPECT_EQ(lay.offsets[0], lay.header.size());
  EXPECT_EQ(lay.offsets[1], lay.header.size() + 8);
  EXPECT_EQ(lay.offsets[2], lay.header.size() + 16);
  EXPECT_EQ(lay.file_size, lay.header.size() + 19);
  // No "__metadata__" when there is none, as the reference library.
  EXPECT_EQ(lay.header.find("__metadata__"), std::string::npos);
  std::string json = lay.header.substr(8);
  EXPECT_EQ(json.substr(0, json.find_last_not_of(' ') + 1),
            R"({"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
            R"("b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}})");
}

TEST(SafetensorsWriter, ChunkedRoundTrip) {
  std::mt19937_64 rng(7);
  // A tensor larger than the writer's 4 MiB buffer, small ones, and an empty one.
  std::vector<TensorSpec> specs = {{"big", DType::BF16, {1536, 2048}},
                                   {"empty", DType::F8_E4M3, {0}},
                                   {"small", DType::F32, {3, 5}},
                                   {"bytes", DType::U8, {1000}},
                                   {"last", DType::I64, {7}}};
  std::vector<std::string> data;
  for (const auto& t : specs) {
    std::string b(t.nbytes(), '\0');
    for (auto& c : b) c = char(rng());
    data.push_back(std::move(b));
  }
  ScratchDir dir;
  std::string path = dir.file("rt.safetensors");
  SafetensorsWriter w(path, specs, {{"format", "pt"}, {"source", "test"}});
  ASSERT_NE(w.current(), nullptr);
  EXPECT_EQ(w.current()->name, "big");
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t pos = 0;
    while (pos < data[i].size()) {
      // Chunks from 1 byte to 6 MiB, crossing the buffer in both directions.
      size_t n = std::min<size_t>(data[i].size() - pos, 1 + rng() % ((rng() % 2) ? 100 : (6u << 20)));
      EXPECT_EQ(w.current()->name, specs[i].name);
      w.write(specs[i].name, data[i].data() + pos, n);
      pos += n;
    }
  }
  EXPECT_EQ(w.current(), nullptr);
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing under the final name yet
  w.finish();
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("source"), "test");
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo* t = nullptr;
    for (const auto& x : f.tensors())
      if (x.name == specs[i].name) t = &x;
    ASSERT_NE(t, nullptr) << specs[i].name;
    EXPECT_EQ(t->dtype, specs[i].dtype);
    EXPECT_EQ(t->shape, specs[i].shape);
    EXPECT_EQ(t->offset, w.layout().offsets[i]);
    ASSERT_EQ(t->nbytes, data[i].size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->nbytes), data[i]) << specs[i].name;
  }
  EXPECT_EQ(f.file_size(), w.layout().file_size);
}

TEST(SafetensorsWriter, RejectsBadDeclarations) {
  ScratchDir dir;
  std::string path = dir.file("bad.safetensors");
  auto make = [&](std::vector<TensorSpec> specs) { SafetensorsWriter w(path, specs); };
  expect_error([&] { make({{"a", DType::U8, {1}}, {"a", DType::U8, {2}}}); }, {path, "tensor a is declared twice"});
  expect_error([&] { make({{"", DType::U8, {1}}}); }, {path, "empty name"});
  expect_error([&] { make({{"__metadata__", DType::U8, {1}}}); }, {path, "\"__metadata__\" cannot name a tensor"});
  expect_error([&] { make({{"n", DType::U8, {4, -1}}}); }, {path, "tensor n", "negative dimension -1"});
  expect_error([&] { make({{"n", DType::U8, {int64_t(1) << 40, int64_t(1) << 30}}}); },
               {path, "tensor n", "more than 2^62 elements"});
  expect_error([&] { make({{"n", DType::F64, {int64_t(1) << 61}}}); }, {path, "tensor n", "2^62 bytes"});
  expect_error([&] { make({{"\xff\xfe", DType::U8, {1}}}); }, {path, "not valid UTF-8"});
  expect_error([&] { SafetensorsWriter w(path, {{"a", DType::U8, {1}}}, {{"k", "\xc3"}}); },
               {path, "__metadata__ value is not valid UTF-8"});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  expect_error([&] { SafetensorsWriter w(dir.file("no/such/dir/x.safetensors"), {}); },
               {"no/such/dir/x.safetensors.partial", "cannot create"});
}

TEST(SafetensorsWriter, RejectsMisuseAndLeavesNothing) {
  ScratchDir dir;
  std::string path = dir.file("m.safetensors");
  std::vector<TensorSpec> specs = {{"first", DType::F32, {2}}, {"second", DType::U8, {3}}};
  const char bytes[16] = {};
  {
    SafetensorsWriter w(path, specs);
    EXPECT_TRUE(std::filesystem::exists(path + ".partial"));
    expect_error([&] { w.write("second", bytes, 3); },
                 {path, "tensor second written out of order: expected first (8 bytes left)"});
    expect_error([&] { w.write("first", bytes, 9); }, {path, "tensor first", "9 bytes written but only 8"});
    expect_error([&] { w.write_tensor("first", bytes, 4); }, {path, "tensor first", "4 bytes given", "needs 8"});
    w.write("first", bytes, 5);
    expect_error([&] { w.write_tensor("first", bytes, 8); }, {path, "after 5 bytes were streamed"});
    expect_error([&] { w.finish(); }, {path, "tensor first is incomplete (5 of 8 bytes written, and later ones)"});
  }  // destroyed without finish(): the partial file goes
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));

  SafetensorsWriter w(path, specs);
  w.write_tensor("first", bytes, 8);
  w.write("second", bytes, 3);
  expect_error([&] { w.write("second", bytes, 1); }, {path, "every declared tensor is already complete"});
  w.finish();
  EXPECT_TRUE(std::filesystem::exists(path));
  expect_error([&] { w.finish(); }, {path, "finish() called twice"});
  expect_error([&] { w.write("first", bytes, 1); }, {path, "write after the file was closed"});
}

TEST(SafetensorsWriter, EmptyTensorsNeedNoWrite) {
  ScratchDir dir;
  std::string path = dir.file("e.safetensors");
  SafetensorsWriter w(path, {{"e0", DType::U8, {0}}, {"x", DType::U8, {2}}, {"e1", DType::BF16, {4, 0}}});
  EXPECT_EQ(w.current()->name, "x");  // e0 is complete from the start
  w.write("e0", nullptr, 0);          // accepted, a no-op
  w.write("x", "ab", 2);
  EXPECT_EQ(w.current(), nullptr);
  w.write("e1", nullptr, 0);
  w.finish();
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().size(), 3u);
}

TEST(SafetensorsWriter, AtomicTextFile) {
  ScratchDir dir;
  std::string path = dir.file("config.json");
  write_file_atomic(path, "{}\n");
  EXPECT_EQ(read_bytes(path), "{}\n");
  write_file_atomic(path, "{\"a\": 1}\n");
  EXPECT_EQ(read_bytes(path), "{\"a\": 1}\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

}  // namespace
}  // namespace nibble
