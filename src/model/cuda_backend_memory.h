// The CUDA backend's device memory, as host logic over an allocator so that
// it is tested on the CPU (with a host allocator) and runs the same on the
// GPU (device/cuda_memory.h):
//
// - StepArena: the step workspace behind Backend::alloc / mark / release_to,
//   with the CPU backend's reuse rule (the k-th live buffer of a step is
//   slot k, which only grows), so a steady-state decode step allocates
//   nothing and hands out the same addresses every time. A slot that must
//   grow is replaced (its old memory is freed, which synchronises the
//   device first and ends a step graph's capture) by one at least half
//   again as large, and `growths()` counts it.
// - WeightMirror: device copies of the small host-resident weights the
//   forward passes by pointer (norm weights, hyper-connection base / scale,
//   F32 hc_*_fn matrices, RoPE frequency tables, router biases), made on
//   first use and found again by address: the first step uploads them, every
//   later one only looks them up. The large matrices do not come through
//   here: they live in the weight store in their kernels' layouts.
// - StagingArena: page-locked host memory for a step's small host inputs
//   (ids, positions, row lists, sampling settings). An upload from pinned
//   memory is asynchronous; one from pageable memory waits for the stream
//   first (device/cuda_memory.h), which made every op that takes a host
//   list a synchronisation of the host with the GPU. Bump-allocated; a step
//   that outgrows its block gets another, and the next reset makes one
//   block of the total, so a steady step allocates nothing (and stages at
//   the same addresses, which a CUDA graph's copies will need).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nibble {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Copies host bytes to device memory; the host bytes may be reused on return.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // Copies device bytes to device memory, in order with the uploads and the
  // backend's kernels (a fork's clone, an entry buffer that grows).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// Page-locked host memory (cudaMallocHost), or plain memory in tests.
class PinnedAllocator {
 public:
  virtual ~PinnedAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
};

class StagingArena {
 public:
  explicit StagingArena(PinnedAllocator& a) : a_(&a) {}
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // A copy of src[0, bytes) in pinned memory, 16-byte aligned, that stays
  // where it is until reset().
  const void* stage(const void* src, size_t bytes);
  // Forgets every staged copy: the caller has waited for the uploads that
  // read them. More than one block becomes one block of their total.
  void reset();

  size_t staged() const { return staged_; }  // bytes staged since the last reset
  size_t blocks() const { return blocks_.size(); }
  uint64_t bytes() const;                    // pinned bytes held

 private:
  struct Block {
    uint8_t* p = nullptr;
    size_t size = 0, used = 0;
  };
  Block make_block(size_t size);
  PinnedAllocator* a_;
  std::vector<Block> blocks_;
  size_t staged_ = 0;
};

class StepArena {
 public:
  explicit StepArena(DeviceAllocator& a) : a_(&a) {}
  ~StepArena();
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;

  void begin_step() { used_ = 0; }
  // `floats` f32 values, 256-byte aligned, valid until release_to a mark
  // taken before this call or the next begin_step.
  float* alloc(int64_t floats);
  size_t mark() const { return used_; }
  void release_to(size_t mark);

  size_t slots() const { return slots_.size(); }
  uint64_t bytes() const;                  // device bytes held
  uint64_t growths() const { return growths_; }  // slot allocations so far (first uses included)

 private:
  struct Slot {
    float* p = nullptr;
    size_t floats = 0;
  };
  DeviceAllocator* a_;
  std::vector<Slot> slots_;
  size_t used_ = 0;
  uint64_t growths_ = 0;
};

class WeightMirror {
 public:
  explicit WeightMirror(DeviceAllocator& a) : a_(&a) {}
  ~WeightMirror();
  WeightMirror(const WeightMirror&) = delete;
  WeightMirror& operator=(const WeightMirror&) = delete;

  // The device copy of host[0, bytes), uploaded the first time this address
  // is asked for. The same address with a different size is a caller's bug
  // (two views of one buffer) and throws, naming `what`. Null gives null.
  const void* device(const void* host, size_t bytes, const char* what);
  template <class T>
  const T* device(const T* host, size_t count, const char* what) {
    return static_cast<const T*>(device(static_cast<const void*>(host), count * sizeof(T), what));
  }

  // Makes device(host, bytes, ..) return `device`, a copy the caller owns
  // and keeps alive (the weight store's); throws if host is mirrored already.
  void adopt(const void* host, size_t bytes, const void* device);

  size_t entries() const { return map_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Copy {
    void* p = nullptr;
    size_t bytes = 0;
    bool owned = true;  // false: adopted, freed by its owner
  };
  DeviceAllocator* a_;
  std::map<const void*, Copy> map_;
  uint64_t bytes_ = 0;
};

}  // namespace nibble
