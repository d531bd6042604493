// The output folder of a conversion, built where no reader can see it half
// done: a temporary folder beside DST (same file system, so the final rename
// is atomic) that becomes DST only after every file in it was written,
// flushed and verified. Until commit() the destructor removes it, so an
// error, an interruption or an exception leaves neither DST nor the
// temporary folder behind.
//
// DST rules: it must not be SRC, inside SRC or contain SRC; an existing DST
// must be a folder; a non-empty one is replaced only with `force`, and then
// only at the very end (an atomic exchange where the file system supports
// it), so a failed conversion leaves the old DST untouched.
#pragma once

#include <string>

namespace nibble {

class OutputStaging {
 public:
  // Checks SRC and DST and creates the temporary folder. Throws nibble::Error.
  OutputStaging(const std::string& src, const std::string& dst, bool force);
  ~OutputStaging();  // removes the temporary folder unless committed
  OutputStaging(const OutputStaging&) = delete;
  OutputStaging& operator=(const OutputStaging&) = delete;

  const std::string& dir() const { return tmp_; }   // where to write
  const std::string& dst() const { return dst_; }
  bool replaces_existing() const { return replaces_; }  // a non-empty DST will be replaced

  // Makes the temporary folder DST (replacing the old one when forced) and
  // syncs the parent folder. Throws nibble::Error and then removes the
  // temporary folder, leaving any old DST as it was.
  void commit();

 private:
  std::string dst_, parent_, tmp_;
  bool force_ = false, replaces_ = false, committed_ = false;
};

// Copies a file's bytes to a new file and fsyncs it; follows symlinks.
// Returns the bytes copied. Throws nibble::Error naming both paths.
uint64_t copy_file_synced(const std::string& from, const std::string& to);

// Removes a folder tree, ignoring errors (used for cleanup only).
void remove_tree_quietly(const std::string& path);

}  // namespace nibble
