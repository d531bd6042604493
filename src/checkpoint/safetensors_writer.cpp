#include "checkpoint/safetensors_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/safetensors.h"
#include "util/error.h"

namespace nibble {

using nlohmann::json;

namespace {

constexpr uint64_t kSizeLimit = uint64_t(1) << 62;  // as the reader
constexpr size_t kBufferBytes = size_t(4) << 20;    // coalesces small chunks
// Largest single write(2). Measured on Linux 6.18 / ext4: write() calls of
// 1 MB and more stall for seconds at random (the page cache allocates large
// folios for them, and compaction under fragmented memory is slow), while
// 128-512 KB calls stream at page-cache speed, like cp's 64 KB splices.
constexpr size_t kMaxWriteCall = size_t(256) << 10;

// Rank of a dtype in the reference library's ordering (its Dtype enum, which
// is sorted by alignment): files list larger ranks first. Measured from
// safetensors 0.8 (`save_file` of one tensor per dtype).
int reference_rank(DType d) {
  switch (d) {
    case DType::BOOL: return 0;
    case DType::U8: return 1;
    case DType::I8: return 2;
    case DType::F8_E5M2: return 3;
    case DType::F8_E4M3: return 4;
    case DType::F8_E8M0: return 5;
    case DType::I16: return 6;
    case DType::U16: return 7;
    case DType::F16: return 8;
    case DType::BF16: return 9;
    case DType::I32: return 10;
    case DType::U32: return 11;
    case DType::F32: return 12;
    case DType::F64: return 13;
    case DType::I64: return 14;
    case DType::U64: return 15;
  }
  return 0;
}

// A JSON string literal, escaped as serde_json (the reference) and nlohmann
// both do; invalid UTF-8 is an error naming what it is.
std::string json_string(const std::string& s, const std::string& path, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail(path, ": ", what, " is not valid UTF-8");
  }
}

void fsync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;  // the rename happened; durability of the entry is best effort
  ::fsync(dfd);
  ::close(dfd);
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, kMaxWriteCall));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path, ": write failed: ", std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

}  // namespace

uint64_t TensorSpec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

SafetensorsLayout plan_safetensors(const std::vector<TensorSpec>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   const std::string& path) {
  SafetensorsLayout lay;
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) text += ',';
      first = false;
      text += json_string(k, path, "a __metadata__ key");
      text += ':';
      text += json_string(v, path, "a __metadata__ value");
    }
    text += '}';
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;  // relative to the data section
  for (const auto& t : tensors) {
    if (t.name.empty()) fail(path, ": a tensor has an empty name");
    if (t.name == "__metadata__") fail(path, ": \"__metadata__\" cannot name a tensor");
    if (!names.insert(t.name).second) fail(path, ": tensor ", t.name, " is declared twice");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail(path, ": tensor ", t.name, ": negative dimension ", d);
      if (d != 0 && numel > kSizeLimit / uint64_t(d))
        fail(path, ": tensor ", t.name, ": shape has more than 2^62 elements");
      numel *= uint64_t(d);
    }
    if (numel > kSizeLimit / dtype_size(t.dtype))
      fail(path, ": tensor ", t.name, " would need more than 2^62 bytes");
    const uint64_t nbytes = numel * dtype_size(t.dtype);
    if (offset > kSizeLimit - nbytes) fail(path, ": the tensors add up to more than 2^62 bytes");

    if (text.size() > 1) text += ',';
    text += json_string(t.name, path, "tensor name " + t.name);
    text += ":{\"dtype\":\"";
    text += dtype_name(t.dtype);
    text += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) text += ',';
      text += std::to_string(t.shape[i]);
    }
    text += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    lay.offsets.push_back(offset);
    lay.nbytes.push_back(nbytes);
    offset += nbytes;
  }
  text += '}';
  // Spaces pad the JSON so that the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeader)
    fail(path, ": header of ", text.size(), " bytes exceeds the ", kMaxSafetensorsHeader,
         "-byte limit readers accept");

  const uint64_t n = text.size();
  lay.header.resize(8);
  for (int i = 0; i < 8; ++i) lay.header[i] = char((n >> (8 * i)) & 0xFF);
  lay.header += text;
  for (auto& o : lay.offsets) o += lay.header.size();
  lay.file_size = lay.header.size() + offset;
  return lay;
}

void sort_like_safetensors(std::vector<TensorSpec>& tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    int ra = reference_rank(a.dtype), rb = reference_rank(b.dtype);
    if (ra != rb) return ra > rb;
    return a.name < b.name;
  });
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), partial_(path_ + ".partial"), tensors_(std::move(tensors)) {
  layout_ = plan_safetensors(tensors_, metadata, path_);
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(partial_, ": cannot create: ", std::strerror(errno));
  buffer_.reserve(kBufferBytes);
  try {
    write_fd(layout_.header.data(), layout_.header.size());
  } catch (...) {
    close_and_remove();
    throw;
  }
  advance_past_empty();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) close_and_remove();
}

void SafetensorsWriter::close_and_remove() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(partial_.c_str());
  }
}

void SafetensorsWriter::advance_past_empty() {
  while (cur_ < tensors_.size() && cur_done_ == layout_.nbytes[cur_]) {
    ++cur_;
    cur_done_ = 0;
  }
}

const TensorSpec* SafetensorsWriter::current() const {
  return cur_ < tensors_.size() ? &tensors_[cur_] : nullptr;
}

uint64_t SafetensorsWriter::remaining() const {
  return cur_ < tensors_.size() ? layout_.nbytes[cur_] - cur_done_ : 0;
}

void SafetensorsWriter::write(std::string_view name, const void* data, size_t n) {
  if (fd_ < 0) fail(path_, ": tensor ", name, ": write after the file was closed");
  if (cur_ >= tensors_.size() || tensors_[cur_].name != name) {
    // A zero-byte tensor was already skipped over; an empty write for it is fine.
    if (n == 0) {
      for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].name == name && layout_.nbytes[i] == 0) return;
    }
    if (cur_ >= tensors_.size())
      fail(path_, ": tensor ", name, ": every declared tensor is already complete");
    fail(path_, ": tensor ", name, " written out of order: expected ", tensors_[cur_].name, " (",
         remaining(), " bytes left)");
  }
  if (n > remaining())
    fail(path_, ": tensor ", name, ": ", n, " bytes written but only ", remaining(), " of its ",
         layout_.nbytes[cur_], " are left");
  write_fd(data, n);
  cur_done_ += n;
  advance_past_empty();
}

void SafetensorsWriter::write_tensor(std::string_view name, const void* data, size_t n) {
  if (cur_ < tensors_.size() && tensors_[cur_].name == name) {
    if (cur_done_ != 0)
      fail(path_, ": tensor ", name, ": write_tensor after ", cur_done_, " bytes were streamed");
    if (n != layout_.nbytes[cur_])
      fail(path_, ": tensor ", name, ": ", n, " bytes given but ", dtype_name(tensors_[cur_].dtype),
           " needs ", layout_.nbytes[cur_]);
  }
  write(name, data, n);
}

void SafetensorsWriter::write_fd(const void* data, size_t n) {
  if (n == 0) return;
  // A piece of at least one write call's size goes straight out (after what
  // is buffered): copying it into the buffer first would cost a pass over
  // memory and gain nothing. The buffer only coalesces small pieces.
  if (n >= kMaxWriteCall || buffer_.size() + n > kBufferBytes) flush_buffer();
  if (n >= kMaxWriteCall) {
    write_all(fd_, data, n, partial_);
    return;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  buffer_.insert(buffer_.end(), p, p + n);
}

void SafetensorsWriter::flush_buffer() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), partial_);
  buffer_.clear();
}

void SafetensorsWriter::finish() {
  if (finished_) fail(path_, ": finish() called twice");
  if (fd_ < 0) fail(path_, ": finish() after a failed write");
  if (cur_ < tensors_.size())
    fail(path_, ": tensor ", tensors_[cur_].name, " is incomplete (", cur_done_, " of ",
         layout_.nbytes[cur_], " bytes written", cur_ + 1 < tensors_.size() ? ", and later ones" : "",
         ")");
  try {
    flush_buffer();
    if (::fsync(fd_) != 0) fail(partial_, ": fsync failed: ", std::strerror(errno));
  } catch (...) {
    close_and_remove();
    throw;
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    int err = errno;
    ::unlink(partial_.c_str());
    fail(partial_, ": close failed: ", std::strerror(err));
  }
  if (::rename(partial_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(partial_.c_str());
    fail(path_, ": cannot rename ", partial_, " into place: ", std::strerror(err));
  }
  fsync_parent_dir(path_);
  finished_ = true;
}

void write_file_atomic(const std::string& path, std::string_view content) {
  std::string tmp = path + ".partial";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, ": cannot create: ", std::strerror(errno));
  try {
    write_all(fd, content.data(), content.size(), tmp);
    if (::fsync(fd) != 0) fail(tmp, ": fsync failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(tmp, ": close failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": cannot rename ", tmp, " into place: ", std::strerror(err));
  }
  fsync_parent_dir(path);
}

void write_safetensors_index(const std::string& path, uint64_t total_size,
                             const std::map<std::string, std::string>& weight_map) {
  json index = json::object();
  index["metadata"] = {{"total_size", total_size}};
  json wm = json::object();
  for (const auto& [name, shard] : weight_map) wm[name] = shard;
  index["weight_map"] = std::move(wm);
  std::string text;
  try {
    // nlohmann objects iterate in key order, which is Python's sort_keys=True.
    text = index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
  } catch (const json::exception&) {
    fail(path, ": a tensor or shard name is not valid UTF-8");
  }
  write_file_atomic(path, text);
}

}  // namespace nibble
