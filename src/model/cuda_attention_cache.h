// DeepSeek-V4's per-sequence attention cache in device memory, the CUDA
// backend's AttentionCache (Backend::new_attention_cache). Host logic over a
// DeviceAllocator, as the step arena (cuda_backend_memory.h), so that its
// bookkeeping (floors, truncation, growth, clones) is tested on the CPU;
// the step that reads and writes it is CudaBackend::attend
// (cuda_backend_attend.cpp).
//
// It holds what the CPU's AttentionState holds, laid out for a GPU:
// - the sliding window ring, [window + rollback, d], position p in row
//   p % rows (the CPU's ring, exactly);
// - per compressor (CSA / HCA, and CSA's indexer), its per-token rows
//   (wkv x, and wgate x + ape) in rings of kPiece + rollback + (CSA: 2,
//   HCA: 1) windows of rows, position p in row p % rows, instead of the CPU's
//   store that drops whole windows from its front: nothing moves in device
//   memory as decode goes on. attend writes at most kPiece rows between two
//   poolings, so a window's rows are all there when it closes;
// - its emitted entries, append-only, in a buffer that doubles when full
//   (a copy on the device; the free of the old buffer ends a step graph's
//   capture, model/cuda_step_graph.h).
// Counters (positions, the highest position written) live on the host.
//
// Truncation down to the floor moves counters only. The floor is the
// deepest of: the window ring's (ring_high - rollback, as the CPU), and each
// compressor's, the first position whose reopened windows' rows the ring
// still holds. Rows of positions at or past the current one after a
// truncation are stale; nothing reads them before they are written again.
#pragma once

#include <cstdint>
#include <memory>

#include "model/attention_cache.h"
#include "model/cuda_backend_memory.h"
#include "model/deepseek_v4_attention.h"

namespace nibble {

// One compressor's device state.
struct DeviceCompressor {
  int64_t ratio = 0, dim = 0, width = 0;  // m, entry width c, row width (CSA: 2c)
  bool overlap = false;
  int64_t ring_rows = 0;
  float* kv = nullptr;       // [ring_rows, width] wkv x of each position
  float* score = nullptr;    // [ring_rows, width] wgate x + ape of its slot
  float* entries = nullptr;  // [entry_capacity, dim]
  int64_t entry_capacity = 0;
  int64_t high = 0;          // one past the highest position whose row was written

  // Entries (closed windows) of a sequence at `position` (its cache's).
  int64_t n_entries(int64_t position) const { return position / ratio; }
  int64_t truncate_floor() const;
};

class DeviceAttentionCache final : public AttentionCache {
 public:
  // Compressor rows attend writes between two poolings.
  static constexpr int64_t kPiece = 64;

  // For the layer with weights *w (which outlive it) and shape s, its memory
  // from `a` (which outlives it too).
  DeviceAttentionCache(DeviceAllocator& a, const AttentionWeights* w, const AttentionShape& s);
  ~DeviceAttentionCache() override;
  DeviceAttentionCache(const DeviceAttentionCache&) = delete;
  DeviceAttentionCache& operator=(const DeviceAttentionCache&) = delete;

  std::unique_ptr<AttentionCache> clone() const override;
  int64_t truncate_floor() const override;
  void truncate(int64_t p) override;
  uint64_t bytes() const override;

  // Room for `n` entries in c's buffer (grows by doubling, keeping the
  // entries of `position`).
  void reserve_entries(DeviceCompressor& c, int64_t n);

  const AttentionWeights& weights() const { return *w_; }
  const AttentionShape& shape() const { return s_; }

  int64_t position = 0;   // tokens fed (attend moves it on; the compressors' too)
  float* ring = nullptr;  // [ring_rows, head_dim]
  int64_t ring_rows = 0;
  int64_t ring_high = 0;  // one past the highest position ever written to the ring
  DeviceCompressor comp;  // CSA / HCA (ratio 0 on sliding layers)
  DeviceCompressor index; // CSA's indexer (ratio 0 elsewhere)

 private:
  void init_compressor(DeviceCompressor& c, const CompressorWeights& w);
  void copy_compressor(DeviceCompressor& to, const DeviceCompressor& from) const;  // at position
  void free_compressor(DeviceCompressor& c);
  float* floats(int64_t n) const;

  DeviceAllocator* a_;
  const AttentionWeights* w_;
  AttentionShape s_;
};

}  // namespace nibble
