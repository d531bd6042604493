// safetensors reader: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
// data. The header is validated strictly (checkpoints.md) before any tensor
// is handed out; data stays in the file's memory map (zero-copy).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/dtype.h"
#include "util/mapped_file.h"

namespace nibble {

struct TensorInfo {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  uint64_t offset = 0;            // first data byte, from the start of the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the file's map; null if only the header was parsed
  std::string file;               // the shard holding it

  int64_t numel() const;
  std::string shape_str() const;  // "[2048, 4096]"
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;          // 8 + N
};

// Upper bound on N: real headers are well under a few MB.
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// Parses and validates a header. `bytes` holds the first `avail` bytes of a
// file of `file_size` bytes (avail may be less than the file: only the header
// must be present). Throws nibble::Error naming `path` (and the tensor).
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t avail, uint64_t file_size,
                                           const std::string& path);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps and validates

  const std::string& path() const { return map_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  uint64_t file_size() const { return map_.size(); }

 private:
  MappedFile map_;
  SafetensorsHeader header_;
};

}  // namespace nibble
