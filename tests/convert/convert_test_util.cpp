#include "convert_test_util.h"

#include <algorithm>

#include "checkpoint/safetensors.h"

namespace nibble::convert_test {

namespace fs = std::filesystem;

std::string fixture(const std::string& rel) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/" + rel; }

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
