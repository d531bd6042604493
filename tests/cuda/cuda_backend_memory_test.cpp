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

TEST(StepArena, ASlotThatKeepsGrowingGrowsLogarithmicallyOften) {
  // A decode buffer that follows the context: 64 more floats every step for
  // 1000 steps. Each growth takes at least 1.5x the slot, from 64 floats up
  // to 64000: at most 1 + ceil(log(1000) / log(1.5)) = 19 allocations, and
  // never more than 1.5x what was asked (plus the alignment).
  HostAllocator host;
  StepArena a(host);
  for (int64_t k = 1; k <= 1000; ++k) {
    a.begin_step();
    float* p = a.alloc(64 * k);
    p[64 * k - 1] = 1.0f;  // the whole buffer is there (the sanitizer build checks)
  }
  EXPECT_GE(a.growths(), 2u);
  EXPECT_LE(a.growths(), 19u);
  EXPECT_LE(a.bytes(), uint64_t(64000 * 3 / 2 + 64) * 4);
  EXPECT_EQ(host.live.size(), 1u);
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

// Weights the store holds (CudaBackend::place_weights): adopted, found by
// their host address like an upload, never copied or freed by the mirror.
TEST(WeightMirror, AdoptsACopyItDoesNotOwn) {
  const std::vector<float> table{1, 2, 3, 4}, norm{5};
  std::vector<float> placed(4);  // stands in for the store's device copy
  {
    HostAllocator host;
    WeightMirror m(host);
    m.adopt(table.data(), 16, placed.data());
    EXPECT_EQ(m.device(table.data(), table.size(), "embed"), placed.data());
    EXPECT_EQ(host.uploads, 0);
    EXPECT_EQ(host.live.size(), 0u);
    EXPECT_EQ(m.bytes(), 0u);
    EXPECT_THROW(m.device(table.data(), 2, "embed"), Error);  // one address, one size
    EXPECT_THROW(m.adopt(table.data(), 16, placed.data()), Error);
    m.device(norm.data(), norm.size(), "norm");
    EXPECT_THROW(m.adopt(norm.data(), 4, placed.data()), Error);  // mirrored already
    EXPECT_EQ(host.live.size(), 1u);
  }  // the mirror released its own copy only (HostAllocator checks every free)
}

// Plain memory standing in for page-locked memory, counting the calls and
// keeping what is live.
class HostPinned final : public PinnedAllocator {
 public:
  ~HostPinned() override { EXPECT_TRUE(live.empty()) << live.size() << " blocks never released"; }
  void* allocate(size_t bytes) override {
    ++allocations;
    void* p = std::malloc(bytes);
    live.insert(p);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    EXPECT_EQ(live.erase(p), 1u) << "released a block it does not hold";
    std::free(p);
  }
  int allocations = 0;
  std::set<void*> live;
};

// A step's host inputs staged: every copy holds its bytes, 16-byte aligned,
// and stays valid while later ones are staged (the uploads from it may still
// be queued), also past a block's end; the reset after such a step makes one
// block of the total, so steady steps allocate nothing and stage at the same
// addresses.
TEST(StagingArena, CopiesStayPutUntilResetAndSteadyStepsAllocateNothing) {
  HostPinned pinned;
  {
    StagingArena a(pinned);
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t n : {size_t(3), size_t(40000), size_t(1), size_t(70000), size_t(0), size_t(9)}) {
      std::vector<uint8_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 7 + n);
      inputs.push_back(v);
    }
    auto step = [&] {
      std::vector<const void*> at;
      for (const auto& v : inputs) at.push_back(a.stage(v.data(), v.size()));
      for (size_t k = 0; k < inputs.size(); ++k) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(at[k]) % 16, 0u) << "copy " << k;
        if (!inputs[k].empty()) {  // (an empty vector's data() may be null: no memcmp on it)
          EXPECT_EQ(std::memcmp(at[k], inputs[k].data(), inputs[k].size()), 0) << "copy " << k;
        }
      }
      return at;
    };
    step();
    EXPECT_GT(a.blocks(), 1u);  // 110 kB past the first 64 kB block
    size_t total = 0;
    for (const auto& v : inputs) total += v.size();
    EXPECT_EQ(a.staged(), total);
    a.reset();
    EXPECT_EQ(a.blocks(), 1u);
    EXPECT_EQ(a.staged(), 0u);
    const int allocations = pinned.allocations;
    const std::vector<const void*> first = step();
    a.reset();
    EXPECT_EQ(step(), first);
    a.reset();
    EXPECT_EQ(pinned.allocations, allocations);
    EXPECT_EQ(a.blocks(), 1u);
    EXPECT_GE(a.bytes(), total);
  }
  EXPECT_TRUE(pinned.live.empty());
}

}  // namespace
}  // namespace nibble
