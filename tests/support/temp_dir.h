// A fresh empty folder under the system temp dir for one test, removed with
// everything in it by the destructor; and whole-file reads and writes.
#pragma once

#include <filesystem>
#include <string>

namespace nibble::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;  // two owners would remove it twice
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // The folder, or `child` inside it.
  std::string str(const std::string& child = "") const;

 private:
  std::filesystem::path path_;
};

// The bytes of `path`; throws std::runtime_error naming it when it cannot be read.
std::string read_file(const std::string& path);
// Replaces `path` with `bytes`; throws std::runtime_error naming it on failure.
void write_file(const std::string& path, const std::string& bytes);

}  // namespace nibble::test
