// safetensors writer that streams: every tensor is declared up front (so the
// header, which holds all offsets, can be written first), then the data is
// written tensor by tensor, in declaration order, in chunks of any size. A
// converter therefore holds one tensor (or one chunk of it) at a time.
//
// Output is deterministic and, for the same tensors in the same order, byte
// for byte what the reference `safetensors` library writes: compact JSON with
// "__metadata__" first and tensors in data order, fields dtype/shape/
// data_offsets, the header padded with spaces to a multiple of 8 bytes.
// sort_like_safetensors() gives the reference library's order.
//
// Nothing half-written is ever left under the final name: data goes to
// "<path>.partial", which finish() fsyncs and renames; a writer destroyed
// before finish() (an exception, a size mismatch) removes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/dtype.h"

namespace nibble {

struct TensorSpec {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;

  uint64_t nbytes() const;  // product of shape * dtype size (call after validation)
};

// The byte layout of a file: what precedes the data, and where each tensor goes.
struct SafetensorsLayout {
  std::string header;             // u64 length + JSON + padding: the file's first bytes
  std::vector<uint64_t> offsets;  // per tensor, in declaration order, from the file start
  std::vector<uint64_t> nbytes;   // per tensor
  uint64_t file_size = 0;
};

// Validates the declarations (unique non-empty names other than
// "__metadata__", valid UTF-8, non-negative shapes, sizes below 2^62 bytes)
// and lays the tensors out in the given order. `path` only names the file in
// errors.
SafetensorsLayout plan_safetensors(const std::vector<TensorSpec>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   const std::string& path);

// The order the reference library writes: larger dtype alignment first (so
// every tensor is aligned to its element size), ties by name.
void sort_like_safetensors(std::vector<TensorSpec>& tensors);

class SafetensorsWriter {
 public:
  // Creates "<path>.partial" and writes the header. Throws nibble::Error.
  SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // removes the partial file unless finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const SafetensorsLayout& layout() const { return layout_; }

  // The tensor whose bytes come next, or nullptr when every tensor is complete.
  const TensorSpec* current() const;
  // Bytes of `current()` still expected.
  uint64_t remaining() const;

  // Appends `n` bytes of tensor `name`, which must be current(); more bytes
  // than it has left is an error. A zero-byte tensor needs no call (a call
  // with n == 0 is accepted for it).
  void write(std::string_view name, const void* data, size_t n);
  // The whole tensor at once: nothing of it written yet, n == its size.
  void write_tensor(std::string_view name, const void* data, size_t n);

  // Checks that every tensor is complete, flushes, fsyncs, and renames the
  // partial file to `path`. The writer is closed afterwards.
  void finish();

 private:
  void advance_past_empty();
  void flush_buffer();
  void write_fd(const void* data, size_t n);
  void close_and_remove();

  std::string path_, partial_;
  std::vector<TensorSpec> tensors_;
  SafetensorsLayout layout_;
  int fd_ = -1;
  size_t cur_ = 0;         // index of the tensor being written
  uint64_t cur_done_ = 0;  // its bytes written so far
  std::vector<uint8_t> buffer_;
  bool finished_ = false;
};

// Writes `content` to `path` atomically (temporary file, fsync, rename).
void write_file_atomic(const std::string& path, std::string_view content);

// model.safetensors.index.json as transformers writes it: {"metadata":
// {"total_size": N}, "weight_map": {tensor: shard}}, indented by 2, keys
// sorted, ASCII only, trailing newline.
void write_safetensors_index(const std::string& path, uint64_t total_size,
                             const std::map<std::string, std::string>& weight_map);

}  // namespace nibble
