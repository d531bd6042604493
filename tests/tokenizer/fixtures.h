// Shared helpers for the tokenizer tests: reading the committed fixtures
// written by tools/gen_tokenizer_fixtures.py.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nibble::test {

inline std::string fixture_path(const std::string& name) {
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

// Where CMake unpacks gpt-oss's tokenizer files (cmake/gptoss_tokenizer.cmake):
// <build>/gptoss-tokenizer, the build folder being the nibble binary's.
inline std::string gptoss_tokenizer_dir() {
  return (std::filesystem::path(NIBBLE_BINARY).parent_path() / "gptoss-tokenizer").string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::json read_fixture(const std::string& name) {
  return nlohmann::json::parse(read_text(fixture_path(name)));
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// A readable form of a test string for failure messages (escapes controls).
inline std::string shown(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace nibble::test
