// Helpers for the checkpoint tests: a temporary folder, raw file writers
// (malformed files are built byte by byte, not through the writer under
// test), and an error-message matcher.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "util/error.h"

namespace nibble::test {

// Named apart from tests/support's TempDir: two classes of one name in one
// test binary break the one-definition rule (the linker keeps one
// constructor for both layouts).
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "nibble-ckpt-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((v >> (8 * i)) & 0xFF);
  return s;
}

// A safetensors file: length prefix, `header` verbatim, then `data`.
inline void write_safetensors_raw(const std::string& path, const std::string& header,
                                  const std::string& data = "") {
  write_bytes(path, u64_le(header.size()) + header + data);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `fn`, which must throw nibble::Error with every fragment in its message.
template <class F>
void expect_error(F&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "message \"" << msg << "\" lacks \"" << f << "\"";
    return;
  }
  ADD_FAILURE() << "no nibble::Error thrown (expected one mentioning " << *fragments.begin() << ")";
}

}  // namespace nibble::test
