#include "cli_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "checkpoint/dtype.h"

namespace nibble::testing {

namespace fs = std::filesystem;

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "nibble-test-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::str(const std::string& child) const {
  return child.empty() ? path_.string() : (path_ / child).string();
}

RunResult run_nibble(const std::vector<std::string>& args) {
  TempDir io;
  std::string cmd = shell_quote(NIBBLE_BINARY);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(io.str("out")) + " 2>" + shell_quote(io.str("err")) + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(io.str("out"));
  r.err = slurp(io.str("err"));
  return r;
}

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::string& header_override) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header_override.empty() ? header.dump() : header_override;
  std::ofstream out(path, std::ios::binary);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xFF));
  out << text;
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size()));
}

RawTensor random_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                        uint32_t seed) {
  RawTensor t{name, dtype, shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = size_t(n) * dtype_size(*parse_dtype(dtype));
  std::mt19937 rng(seed);
  t.data.resize(bytes);
  for (auto& b : t.data) b = uint8_t(rng() & 0x3F);  // small values: finite in every float type
  return t;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace nibble::testing
