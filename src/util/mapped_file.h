// A read-only memory map of a whole file. Weights stay in the page cache and
// are read in place (zero-copy load); closing the map releases them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nibble {

class MappedFile {
 public:
  // Throws nibble::Error naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nibble
