// The CUDA backend's weight store: every weight of a model in one device
// allocation, each in the layout of the kernel that reads it, uploaded at
// load from the mmap'd shards through two pinned staging buffers (filled on
// the host while the other one is copying). The CUDA backend of issue 16
// builds a list of StoreEntry from its bound weights, calls
// upload_weight_store (or CudaWeightStore::load, weight_store_cuda.h) and
// reads part addresses from the result.
//
// A model that does not fit is refused before anything is allocated or
// copied, with the sizes (check_store_fits). The upload runs against a
// StoreTarget: the CUDA one (pinned buffers, cudaMemcpyAsync, events) or a
// host fake in the tests, which check the layouts, the double buffering and
// the refusal on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/weight_view.h"

namespace nibble {

class ThreadPool;

// How a tensor sits in device memory.
enum class DeviceLayout {
  w4a16,   // MXFP4 / NVFP4 matrices: the W4A16 kernels' repacked layout (w4a16_layout.h)
  mma,     // FP8 block-128 / BF16 matrices: the tensor-core linear layout (mma_layout.h)
  stored,  // everything else (norms, F32 matrices, tables): the stored bytes as they are
};
const char* device_layout_name(DeviceLayout l);

// The layout a CUDA kernel wants for a tensor of `format` (matrix: a weight
// a kernel multiplies, [out, in]).
DeviceLayout cuda_layout_for(Format format, bool is_matrix);

// Device bytes of one tensor in cuda_layout_for's layout, padding included
// (`stored_bytes` is returned for the stored layout). `explain --device
// cuda` adds these up per group.
uint64_t cuda_layout_bytes(Format format, bool is_matrix, int64_t rows, int64_t cols, uint64_t stored_bytes);

// One thing to hold: a single matrix (views.size() == 1) or a stack of
// same-shaped matrices stored back to back (one projection of every expert
// of a layer, as the MoE kernel reads them), or raw bytes.
struct StoreEntry {
  std::string name;                 // "layers.3.ffn.experts.w1", for messages
  DeviceLayout layout = DeviceLayout::stored;
  std::vector<WeightView> views;    // w4a16 / mma: the matrices, all of one format and shape
  const uint8_t* raw = nullptr;     // stored: the bytes (into the mmap)
  uint64_t raw_bytes = 0;
};

// Where an entry's parts sit in the allocation. Parts, each 256-byte
// aligned, each holding the views back to back:
//   w4a16: 0 words, 1 scale codes, 2 f32 global scales (one per view)
//   mma:   0 words, 1 f32 tile scales (FP8; 0 bytes for BF16)
//   stored: 0 the bytes
struct StorePart {
  uint64_t offset = 0;     // from the allocation's start
  uint64_t bytes = 0;      // all views
  uint64_t per_view = 0;   // bytes of one view
};
struct StoreEntryPlan {
  std::vector<StorePart> parts;
  uint64_t bytes() const;  // sum of the parts, without alignment
};
struct StorePlan {
  std::vector<StoreEntryPlan> entries;  // as the StoreEntry list
  uint64_t total_bytes = 0;              // the allocation, alignment included
};

// Checks every entry (views of one format and shape, a layout that fits the
// format) and lays the parts out. Throws nibble::Error naming the entry.
StorePlan plan_weight_store(const std::vector<StoreEntry>& entries);

// Throws nibble::Error when plan.total_bytes + reserve_bytes exceeds
// free_bytes: "the weights need X GiB on DEVICE plus R GiB reserved ...;
// DEVICE has F GiB free of T GiB: the model does not fit (nothing was
// copied)", with the three largest entries named.
void check_store_fits(const StorePlan& plan, const std::vector<StoreEntry>& entries, uint64_t reserve_bytes,
                      uint64_t free_bytes, uint64_t total_bytes, const std::string& device);

// The device side of an upload.
class StoreTarget {
 public:
  virtual ~StoreTarget() = default;
  virtual std::string name() const = 0;                       // "cuda:0"
  virtual void memory(uint64_t* free_bytes, uint64_t* total_bytes) = 0;
  virtual uint8_t* allocate(uint64_t bytes) = 0;              // the one allocation (device address)
  // Pinned host staging buffer i (0 or 1), `bytes` long, made on first use.
  virtual uint8_t* staging(int i, uint64_t bytes) = 0;
  // Starts copying staging buffer i's first n bytes to dst; returns at once.
  virtual void copy_async(int i, uint8_t* dst, uint64_t n) = 0;
  virtual void wait(int i) = 0;    // returns when buffer i's last copy is done
  virtual void finish() = 0;       // every copy done; throws on a copy error
};

struct StoreUpload {
  StorePlan plan;
  uint8_t* base = nullptr;   // the allocation (device address)
  uint8_t* part(size_t entry, size_t p) const { return base + plan.entries[entry].parts[p].offset; }
};

// done, total: bytes copied so far and in all; called after each piece.
using StoreProgress = std::function<void(uint64_t done, uint64_t total)>;

// Plans, refuses what does not fit (before allocating: check_store_fits),
// allocates, then repacks every entry into the staging buffers and copies
// it, alternating the two buffers so that the host fills one while the
// other is in flight. staging_bytes: each buffer's size (at least one
// 16-row strip of the widest mma matrix). pool (may be null): repacks run on
// its threads (the strips of a piece, or a batch of a stack's matrices),
// since one core repacks only ~0.7 GB/s, far below a PCIe link.
StoreUpload upload_weight_store(const std::vector<StoreEntry>& entries, StoreTarget& target, uint64_t reserve_bytes,
                                uint64_t staging_bytes, const StoreProgress& progress = {}, ThreadPool* pool = nullptr);

// A progress bar on stderr ("upload cuda:0 [#####     ] 42%  12.3 / 29.1 GiB"),
// redrawn at most every 1%.
StoreProgress stderr_progress_bar(const std::string& device);

}  // namespace nibble
