// A DeviceAllocator over host memory that records every call, so that the
// CUDA backend's memory logic (model/cuda_backend_memory.h,
// model/cuda_attention_cache.h) is tested on the CPU: leaks, releases of
// memory it did not hand out, and copies outside its allocations fail the
// test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "model/cuda_backend_memory.h"

namespace nibble::test {

class HostAllocator : public DeviceAllocator {
 public:
  ~HostAllocator() override { EXPECT_TRUE(live.empty()) << live.size() << " allocations leaked"; }
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded ? rounded : 256);
    live[p] = bytes;
    ++allocations;
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    EXPECT_EQ(live.erase(p), 1u) << "released memory it did not allocate";
    std::free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    EXPECT_TRUE(inside(dst, bytes)) << "upload outside the memory it allocated";
    std::memcpy(dst, src, bytes);
    ++uploads;
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    EXPECT_TRUE(inside(dst, bytes) && inside(src, bytes)) << "copy outside the memory it allocated";
    std::memmove(dst, src, bytes);
    ++copies;
  }
  // Whether [p, p + bytes) lies in one live allocation.
  bool inside(const void* p, size_t bytes) const {
    auto it = live.upper_bound(const_cast<void*>(p));
    if (it == live.begin()) return false;
    --it;
    const auto* base = static_cast<const uint8_t*>(it->first);
    const auto* q = static_cast<const uint8_t*>(p);
    return q >= base && q + bytes <= base + it->second;
  }
  std::map<void*, size_t> live;
  int allocations = 0, uploads = 0, copies = 0;
};

}  // namespace nibble::test
