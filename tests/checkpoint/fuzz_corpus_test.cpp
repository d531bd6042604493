// Replays the committed libFuzzer corpus (tests/fuzz/corpus/safetensors_header,
// minimized from `make fuzz` runs) through parse_safetensors_header exactly as
// the harness does, so every build exercises it without clang: each input
// as a whole file, and wrapped as a header whose file continues past the
// readable bytes. Rejections are fine; they must be nibble::Error, and
// accepted headers must satisfy the invariants the loader relies on.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "checkpoint/safetensors.h"
#include "test_util.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  size_t accepted = 0, rejected = 0;
};

void replay(const std::string& bytes, uint64_t file_size, const std::string& label, Outcome* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  SafetensorsHeader h;
  try {
    h = parse_safetensors_header(p, bytes.size(), file_size, label);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(label), std::string::npos) << e.what();
    ++out->rejected;
    return;
  }
  ++out->accepted;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  EXPECT_EQ(h.data_start, 8 + n) << label;
  std::set<std::string> names;
  uint64_t prev_end = h.data_start;
  for (const auto& t : h.tensors) {
    EXPECT_TRUE(names.insert(t.name).second) << label << " " << t.name;
    unsigned __int128 bytes_needed = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      EXPECT_GE(d, 0) << label;
      bytes_needed *= uint64_t(d);
    }
    EXPECT_TRUE(bytes_needed == t.nbytes) << label << " " << t.name;
    EXPECT_GE(t.offset, h.data_start) << label;
    EXPECT_LE(t.offset + t.nbytes, file_size) << label;
    if (t.nbytes == 0) continue;
    EXPECT_GE(t.offset, prev_end) << label << " " << t.name;
    prev_end = t.offset + t.nbytes;
  }
}

TEST(FuzzCorpus, ReplaysWithoutCrashing) {
  const fs::path dir = fs::path(NIBBLE_SOURCE_DIR) / "tests/fuzz/corpus/safetensors_header";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 50u);  // a real corpus, not a placeholder
  Outcome whole, wrapped;
  for (const auto& f : files) {
    std::string bytes = test::read_bytes(f.string());
    replay(bytes, bytes.size(), f.filename().string(), &whole);
    std::string w = test::u64_le(bytes.size()) + bytes;
    replay(w, w.size() + (1u << 20), f.filename().string(), &wrapped);
  }
  // The corpus covers both outcomes (seeds include valid reference files).
  EXPECT_GT(whole.accepted + wrapped.accepted, 0u);
  EXPECT_GT(whole.rejected + wrapped.rejected, 0u);
}

}  // namespace
}  // namespace nibble
