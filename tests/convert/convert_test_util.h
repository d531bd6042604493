// Helpers for the convert tests: temporary folders, running the nibble
// binary (NIBBLE_BINARY) as a user would, reading whole files and folders,
// and raw access to the tensors of an output folder through the Checkpoint
// reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace nibble::convert_test {

// NIBBLE_SOURCE_DIR/tests/fixtures/<rel>
std::string fixture(const std::string& rel);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str(const std::string& child = "") const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct RunResult {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out, err;
};

// Runs `prefix NIBBLE_BINARY args...` through /bin/sh; `prefix` is shell
// text such as "ulimit -f 64;" (empty for none).
RunResult run_nibble(const std::vector<std::string>& args, const std::string& prefix = "");

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
nlohmann::json read_json(const std::string& path);

// Every regular file under `dir` (relative path -> bytes), hidden ones included.
std::map<std::string, std::string> snapshot(const std::string& dir);
// Entries of `dir` (names), hidden ones included.
std::vector<std::string> list_dir(const std::string& dir);
void copy_tree(const std::string& from, const std::string& to);

// The bytes of a stored tensor.
std::string tensor_bytes(const TensorInfo& t);

// All tensors of an expected-values file (tests/fixtures/convert/expected).
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::map<std::string, RawTensor> read_expected(const std::string& path);

}  // namespace nibble::convert_test
