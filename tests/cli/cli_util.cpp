#include "cli_util.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/dtype.h"

namespace nibble::testing {

std::string source_path(const std::string& relative) { return std::string(NIBBLE_SOURCE_DIR) + "/" + relative; }

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
