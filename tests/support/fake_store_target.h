// A host fake of the weight store's device (kernels/cuda/weight_store.h's
// StoreTarget), for the store's tests on the CPU: its "device memory" is a
// host vector, and it performs each copy only when the uploader waits for
// that buffer (as an async DMA may), so refilling a buffer before its copy
// finished delivers the wrong bytes; it also counts such refills and copies
// outside the allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/weight_store.h"

namespace nibble::test {

class FakeTarget final : public StoreTarget {
 public:
  FakeTarget(uint64_t free_bytes, uint64_t total_bytes) : free_(free_bytes), total_(total_bytes) {}
  std::string name() const override { return "fake:0"; }
  void memory(uint64_t* f, uint64_t* t) override {
    *f = free_;
    *t = total_;
  }
  uint8_t* allocate(uint64_t bytes) override {
    ++allocations;
    arena.assign(bytes, 0xCD);  // not zero: padding must be written, not assumed
    return arena.data();
  }
  uint8_t* staging(int i, uint64_t bytes) override {
    ++staging_calls;
    if (pending[i].n) ++refills_while_pending;
    if (buffers[i].empty()) buffers[i].resize(bytes);
    return buffers[i].data();
  }
  void copy_async(int i, uint8_t* dst, uint64_t n) override {
    ++copies;
    if (dst < arena.data() || dst + n > arena.data() + arena.size()) ++out_of_bounds;
    if (n > buffers[i].size()) ++out_of_bounds;
    pending[i] = {dst, n};
    copied += n;
  }
  void wait(int i) override { flush(i); }
  void finish() override {
    flush(0);
    flush(1);
    ++finishes;
  }

  std::vector<uint8_t> arena;
  std::vector<uint8_t> buffers[2];
  int allocations = 0, staging_calls = 0, copies = 0, finishes = 0, refills_while_pending = 0, out_of_bounds = 0;
  uint64_t copied = 0;

 private:
  struct Pending {
    uint8_t* dst = nullptr;
    uint64_t n = 0;
  };
  void flush(int i) {
    if (pending[i].n) std::memcpy(pending[i].dst, buffers[i].data(), pending[i].n);
    pending[i] = {};
  }
  uint64_t free_, total_;
  Pending pending[2];
};

}  // namespace nibble::test
