// Helpers for the CLI tests: write small raw safetensors files (including
// deliberately broken ones) into temp folders; running the binary and the
// folders themselves come from tests/support.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble::testing {

// Temp folders and running the binary: tests/support, shared with the
// other test folders.
using test::InterruptRun;
using test::RunResult;
using test::run_nibble;
using test::run_nibble_interrupted;
using test::TempDir;

// The shipped model and the test fixtures of the repository.
std::string source_path(const std::string& relative);

struct RawTensor {
  std::string name;
  std::string dtype;          // "BF16"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly numel * size, unless testing a mismatch
};

// Writes a safetensors file: tensors laid out in order. `header_override`,
// when non-empty, replaces the JSON header text verbatim.
void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::string& header_override = "");
RawTensor random_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                        uint32_t seed);
void write_text(const std::string& path, const std::string& text);

}  // namespace nibble::testing
