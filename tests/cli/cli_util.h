// Helpers for the CLI tests: run the nibble binary, and write small raw
// safetensors files (including deliberately broken ones) into temp folders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace nibble::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs NIBBLE_BINARY with `args` (each shell-quoted).
RunResult run_nibble(const std::vector<std::string>& args);

// The same with `input` on stdin, and stdout sent to `stdout_path` instead
// of being captured when that is not empty (e.g. "/dev/full").
RunResult run_nibble(const std::vector<std::string>& args, const std::string& input,
                     const std::string& stdout_path = "");

// Starts nibble with pipes, writes `first_input` to its stdin, waits until
// its stdout holds `wait_for` (any byte if empty; at most `timeout_s`), sends SIGINT, writes
// `then_input`, closes stdin and collects the rest. `interrupted` is set
// when the SIGINT was sent (wait_for appeared in time).
struct InterruptRun {
  RunResult result;
  bool interrupted = false;
  std::string out_at_interrupt;  // stdout when the SIGINT was sent
};
// With `after_s` >= 0 it does not wait for output: the SIGINT goes
// `after_s` seconds after the start.
InterruptRun run_nibble_interrupted(const std::vector<std::string>& args, const std::string& first_input,
                                    const std::string& wait_for, const std::string& then_input,
                                    double timeout_s = 120, double after_s = -1);

// The shipped model and the test fixtures of the repository.
std::string source_path(const std::string& relative);

// A fresh empty folder under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const;

 private:
  std::filesystem::path path_;
};

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
