// The CUDA backend's step arena and weight mirror (model/cuda_backend_memory.h)
// on the CPU, over a host allocator that records every call: steady-state
// steps allocate nothing and get the same addresses (what a CUDA graph of a
// step relies on), release_to hands slots out again, a slot that must grow is
// replaced and counted, alignment, and the mirror uploads each weight once.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

#include "model/cuda_backend_memory.h"
#include "support/host_allocator.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::HostAllocator;

TEST(StepArena, SteadyStepsReuseTheSameAddresses) {
  HostAllocator host;
  StepArena a(host);
  auto step = [&] {
    std::vector<float*> got;
    a.begin_step();
    got.push_back(a.alloc(1000));
    const size_t m = a.mark();
    got.push_back(a.alloc(5));
    got.push_back(a.alloc(70));
    a.release_to(m);
    got.push_back(a.alloc(3));  // slot 1 again, as the CPU backend would
    got.push_back(a.alloc(0));
    return got;
  };
  const std::vector<float*> first = step();
  const int allocs = host.allocations;
  EXPECT_EQ(a.slots(), 3u);
  EXPECT_EQ(first[3], first[1]);
  for (float* p : first) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(step(), first) << "step " << i + 2;
  EXPECT_EQ(host.allocations, allocs) << "a steady-state step allocated";
  EXPECT_EQ(a.growths(), uint64_t(allocs));
}

TEST(StepArena, ASlotThatMustGrowIsReplacedAndCounted) {
  HostAllocator host;
  StepArena a(host);
  a.begin_step();
  a.alloc(10);
  const uint64_t g = a.growths();
  a.begin_step();
  a.alloc(64);  // rounded to 64 on the first use: no growth
  EXPECT_EQ(a.growths(), g);
  a.begin_step();
  float* p = a.alloc(100000);
  EXPECT_EQ(a.growths(), g + 1);
  EXPECT_EQ(host.live.size(), 1u) << "the old slot was not freed";
  p[99999] = 1.0f;  // the whole buffer is there (the sanitizer build checks)
  EXPECT_GE(a.bytes(), 100000u * 4);
}

TEST(StepArena, ReleasePastTheInUseBuffersIsABug) {
  HostAllocator host;
  StepArena a(host);
  a.begin_step();
  a.alloc(1);
  EXPECT_THROW(a.release_to(2), Error);
  EXPECT_THROW(a.alloc(-1), Error);
}

TEST(WeightMirror, UploadsEachWeightOnceAndFindsItAgain) {
  HostAllocator host;
  WeightMirror m(host);
  const std::vector<float> norm{1, 2, 3}, bias{4, 5};
  const float* d = m.device(norm.data(), norm.size(), "attn_norm");
  EXPECT_EQ(std::memcmp(d, norm.data(), 12), 0);
  EXPECT_EQ(m.device(norm.data(), norm.size(), "attn_norm"), d);
  const float* e = m.device(bias.data(), bias.size(), "gate_bias");
  EXPECT_NE(e, d);
  EXPECT_EQ(host.uploads, 2);
  EXPECT_EQ(m.entries(), 2u);
  EXPECT_EQ(m.bytes(), 20u);
  EXPECT_EQ(m.device(static_cast<const float*>(nullptr), 4, "nothing"), nullptr);
  try {
    m.device(norm.data(), 2, "attn_norm");
    FAIL() << "a second size for one address was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("attn_norm"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace nibble
