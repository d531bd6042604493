// Helpers for the convert tests: reading whole folders, and raw access to
// the tensors of an output folder through the Checkpoint reader (temporary
// folders and running the binary come from tests/support).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble::convert_test {

// NIBBLE_SOURCE_DIR/tests/fixtures/<rel>
std::string fixture(const std::string& rel);

// Temp folders, running the binary and whole-file reads: tests/support,
// shared with the other test folders.
using test::read_file;
using test::RunResult;
using test::run_nibble;
using test::run_nibble_in_shell;
using test::TempDir;
using test::write_file;

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
