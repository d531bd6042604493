// The safetensors reader against hand-built files: every malformation named
// in checkpoints.md is rejected with a message naming the file and tensor,
// and the valid corner cases (scalars, empty tensors, gaps, padding) load
// with the right offsets and bytes.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/safetensors.h"
#include "test_util.h"

namespace nibble {
namespace {

using test::expect_error;
using test::ScratchDir;
using test::write_safetensors_raw;

// Writes `header` (+ `data_size` bytes of zero data) and opens it; the
// expected error names the file and carries every fragment.
void expect_bad(const std::string& header, size_t data_size,
                std::initializer_list<std::string> fragments) {
  ScratchDir dir;
  std::string path = dir.file("bad.safetensors");
  write_safetensors_raw(path, header, std::string(data_size, '\0'));
  expect_error([&] { SafetensorsFile f(path); }, {path});
  expect_error([&] { SafetensorsFile f(path); }, fragments);
}

TEST(SafetensorsReader, FileTooSmall) {
  ScratchDir dir;
  for (size_t n : {0, 1, 7}) {
    std::string path = dir.file("small.safetensors");
    test::write_bytes(path, std::string(n, '\x01'));
    expect_error([&] { SafetensorsFile f(path); }, {path, "too small"});
  }
}

TEST(SafetensorsReader, HeaderLengthAbsurd) {
  ScratchDir dir;
  std::string path = dir.file("huge.safetensors");
  test::write_bytes(path, test::u64_le(uint64_t(1) << 40) + "{}");
  expect_error([&] { SafetensorsFile f(path); }, {path, "absurdly large"});
  test::write_bytes(path, test::u64_le(~uint64_t(0)) + "{}");
  expect_error([&] { SafetensorsFile f(path); }, {path, "absurdly large"});
}

TEST(SafetensorsReader, HeaderLengthPastEnd) {
  ScratchDir dir;
  std::string path = dir.file("short.safetensors");
  test::write_bytes(path, test::u64_le(100) + "{}");
  expect_error([&] { SafetensorsFile f(path); }, {path, "header length 100 runs past the end"});
}

TEST(SafetensorsReader, HeaderNotReadable) {
  std::string bytes = test::u64_le(2) + "{}";
  // Only 9 of the 10 header bytes are in memory although the file is longer.
  expect_error([&] { parse_safetensors_header((const uint8_t*)bytes.data(), 9, 1000, "x.st"); },
               {"x.st", "needs 10 bytes but only 9"});
  expect_error([&] { parse_safetensors_header((const uint8_t*)bytes.data(), 10, 9, "x.st"); },
               {"x.st", "readable bytes but the file has 9"});
}

TEST(SafetensorsReader, InvalidJson) {
  expect_bad(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]})", 1, {"not valid JSON"});
  expect_bad("", 0, {"not valid JSON"});
  expect_bad(R"({"a": 1e999})", 0, {"not valid JSON"});
  expect_bad("{\"\xff\": {}}", 0, {"not valid JSON"});  // invalid UTF-8
  expect_bad("{} trailing", 0, {"not valid JSON"});
  expect_bad(std::string("{}\0\0", 4), 0, {"not valid JSON", "NUL byte at offset 2"});
  expect_bad(std::string("{\"a\0\": {}}", 10), 0, {"not valid JSON"});
}

TEST(SafetensorsReader, HeaderNotAnObject) {
  expect_bad("[]", 0, {"header is a JSON array, not an object"});
  expect_bad("42", 0, {"not an object"});
}

TEST(SafetensorsReader, DuplicateKeys) {
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                 "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
             2, {"duplicate key \"w\""});
  expect_bad(R"({"w": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})", 1,
             {"duplicate key \"dtype\""});
  expect_bad(R"({"__metadata__": {"a": "1"}, "__metadata__": {"a": "2"}})", 0,
             {"duplicate key \"__metadata__\""});
  expect_bad(R"({"__metadata__": {"a": "1", "a": "2"}})", 0, {"duplicate key \"a\""});
}

TEST(SafetensorsReader, NestingTooDeep) {
  expect_bad(R"({"__metadata__": {"k": {"x": {}}}})", 0, {"nests deeper"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [[1]], "data_offsets": [0, 1]}})", 1, {"nests deeper"});
  expect_bad(std::string(5000, '[') + std::string(5000, ']'), 0, {"nests deeper"});
}

TEST(SafetensorsReader, EntryNotAnObject) {
  expect_bad(R"({"w": 5})", 0, {"tensor w", "not an object"});
  expect_bad(R"({"w": [1, 2]})", 0, {"tensor w", "JSON array, not an object"});
}

TEST(SafetensorsReader, BadDtype) {
  expect_bad(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", 1, {"tensor w", "missing \"dtype\""});
  expect_bad(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "\"dtype\" is not a string"});
  expect_bad(R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "unknown dtype \"F4\""});
  expect_bad(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4,
             {"tensor w", "unknown dtype \"f32\""});
}

TEST(SafetensorsReader, BadShape) {
  expect_bad(R"({"w": {"dtype": "U8", "data_offsets": [0, 1]}})", 1, {"tensor w", "missing \"shape\""});
  expect_bad(R"({"w": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}})", 1,
             {"tensor w", "\"shape\" is not an array"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "shape value -1 is negative"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "shape must hold integers"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": ["1"], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "shape must hold integers"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "is too large"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [-9223372036854775808], "data_offsets": [0, 1]}})", 1,
             {"tensor w", "is negative"});
  // 2^31 * 2^31 * 4 = 2^64 elements: the product would wrap to 0 in 64 bits.
  expect_bad(R"({"w": {"dtype": "U8", "shape": [2147483648, 2147483648, 4], "data_offsets": [0, 0]}})",
             0, {"tensor w", "more than 2^62 elements"});
  // 2^61 F64 elements fit the element limit but not the byte limit.
  expect_bad(R"({"w": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", 0,
             {"tensor w", "more than 2^62 bytes"});
}

TEST(SafetensorsReader, BadOffsets) {
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1]}})", 1, {"tensor w", "missing \"data_offsets\""});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1,
             {"tensor w", "must be [begin, end]"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": {"a": 0}}})", 1,
             {"tensor w", "must be [begin, end]"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", 1,
             {"tensor w", "data_offsets value -1 is negative"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, null]}})", 1,
             {"tensor w", "data_offsets must hold integers"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [5, 4]}})", 8,
             {"tensor w", "end 4 < begin 5"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})", 8,
             {"tensor w", "run past the end of the file (8 data bytes"});
  expect_bad(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 9223372036854775807]}})", 8,
             {"tensor w", "is too large"});
}

TEST(SafetensorsReader, SizeMismatch) {
  expect_bad(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 15]}})", 16,
             {"tensor w", "holds 15 bytes but F32 [2, 2] needs 16"});
  expect_bad(R"({"w": {"dtype": "BF16", "shape": [], "data_offsets": [0, 4]}})", 4,
             {"tensor w", "holds 4 bytes but BF16 [] needs 2"});
}

TEST(SafetensorsReader, Overlap) {
  expect_bad(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                 "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
             12, {"tensors a and b overlap"});
  // Identical ranges overlap too; the one listed last in the JSON is not special.
  expect_bad(R"({"z": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]},
                 "y": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
             4, {"tensors y and z overlap"});
  // A tensor contained in an earlier one, with a third between them.
  expect_bad(R"({"big": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
                 "mid": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]},
                 "end": {"dtype": "U8", "shape": [4], "data_offsets": [16, 20]}})",
             20, {"tensors big and mid overlap"});
}

TEST(SafetensorsReader, BadMetadata) {
  expect_bad(R"({"__metadata__": ["format", "pt"]})", 0, {"__metadata__ is a JSON array"});
  expect_bad(R"({"__metadata__": {"format": 1}})", 0, {"__metadata__ value \"format\" is not a string"});
}

TEST(SafetensorsReader, ValidCornerCases) {
  ScratchDir dir;
  std::string path = dir.file("ok.safetensors");
  // Listed out of order, a gap of 4 bytes before "late", a scalar, an empty
  // tensor, metadata, and header padding with spaces.
  std::string header = R"({"late": {"dtype": "U16", "shape": [2], "data_offsets": [12, 16]},)"
                       R"( "__metadata__": {"format": "pt"},)"
                       R"( "scalar": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},)"
                       R"( "empty": {"dtype": "BF16", "shape": [3, 0], "data_offsets": [4, 4]},)"
                       R"( "bytes": {"dtype": "I8", "shape": [2, 2], "data_offsets": [4, 8]}}   )";
  const std::string data("\x00\x00\xc0\x3f" "\x01\x02\x03\x04" "GAP!" "\x34\x12\x78\x56", 16);
  write_safetensors_raw(path, header, data);
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const uint64_t data_start = 8 + header.size();
  // Sorted by offset; the empty tensor sorts before "bytes" at the same offset.
  EXPECT_EQ(f.tensors()[0].name, "scalar");
  EXPECT_EQ(f.tensors()[1].name, "empty");
  EXPECT_EQ(f.tensors()[2].name, "bytes");
  EXPECT_EQ(f.tensors()[3].name, "late");
  const auto& scalar = f.tensors()[0];
  EXPECT_EQ(scalar.offset, data_start);
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.numel(), 1);
  float v;
  std::memcpy(&v, scalar.data, 4);
  EXPECT_EQ(v, 1.5f);
  EXPECT_EQ(f.tensors()[1].numel(), 0);
  EXPECT_EQ(f.tensors()[1].nbytes, 0u);
  EXPECT_EQ(f.tensors()[1].shape_str(), "[3, 0]");
  EXPECT_EQ(f.tensors()[2].data[3], 4);
  const auto& late = f.tensors()[3];
  EXPECT_EQ(late.offset, data_start + 12);
  EXPECT_EQ(late.dtype, DType::U16);
  EXPECT_EQ(late.data[0], 0x34);
  EXPECT_EQ(late.data[3], 0x56);
  EXPECT_EQ(late.file, path);
}

TEST(SafetensorsReader, EmptyHeaderAndNoTensors) {
  ScratchDir dir;
  std::string path = dir.file("none.safetensors");
  write_safetensors_raw(path, "{}      ");
  SafetensorsFile f(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.file_size(), 16u);
}

TEST(SafetensorsReader, EveryDtypeName) {
  // One tensor of each known dtype, 3 elements each, laid out back to back.
  const char* names[] = {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64",
                         "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0"};
  const size_t sizes[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1, 1};
  std::string header = "{";
  size_t off = 0;
  for (size_t i = 0; i < std::size(names); ++i) {
    if (i) header += ",";
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"" + names[i] + "\",\"shape\":[3],";
    header += "\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + 3 * sizes[i]) + "]}";
    off += 3 * sizes[i];
  }
  header += "}";
  ScratchDir dir;
  std::string path = dir.file("all.safetensors");
  write_safetensors_raw(path, header, std::string(off, '\0'));
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), std::size(names));
  for (size_t i = 0; i < std::size(names); ++i) {
    EXPECT_STREQ(dtype_name(f.tensors()[i].dtype), names[i]);
    EXPECT_EQ(f.tensors()[i].nbytes, 3 * sizes[i]);
  }
}

}  // namespace
}  // namespace nibble
