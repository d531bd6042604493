#include "convert_test_util.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "checkpoint/safetensors.h"

namespace nibble::convert_test {

namespace fs = std::filesystem;

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string fixture(const std::string& rel) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/" + rel; }

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "nibble-convert-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::str(const std::string& child) const {
  return child.empty() ? path_.string() : (path_ / child).string();
}

RunResult run_nibble(const std::vector<std::string>& args, const std::string& prefix) {
  TempDir io;
  std::string cmd = prefix + " " + shell_quote(NIBBLE_BINARY);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(io.str("out")) + " 2>" + shell_quote(io.str("err")) + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(io.str("out"));
  r.err = read_file(io.str("err"));
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  return out;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void copy_tree(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
}

std::string tensor_bytes(const TensorInfo& t) {
  return std::string(reinterpret_cast<const char*>(t.data), size_t(t.nbytes));
}

std::map<std::string, RawTensor> read_expected(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, RawTensor> out;
  for (const auto& t : f.tensors()) out[t.name] = {dtype_name(t.dtype), t.shape, tensor_bytes(t)};
  return out;
}

}  // namespace nibble::convert_test
