// The CUDA backend's per-sequence attention cache (model/cuda_attention_cache.h)
// on the CPU, over a host allocator: its floor against a brute-force search
// of the positions whose refeed finds every row it needs still in the
// rings, the rollback it promises in steady decode, truncation in and out
// of range, clones that copy every buffer and evolve apart, entry buffers
// that grow without losing entries, and the CPU backend refusing it. What
// attend writes into it is checked on a GPU (cuda_backend_gpu_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/cuda_attention_cache.h"
#include "support/attention_layer.h"
#include "support/host_allocator.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::HostAllocator;

AttentionWeights layer(AttnKind kind, int64_t ratio, int64_t dim) {
  return test::attention_layer(kind, ratio, dim, 2, 7);
}

AttentionShape shape(int64_t window, int64_t rollback) {
  AttentionShape s;
  s.heads = 2;
  s.head_dim = 16;
  s.window = window;
  s.rollback = rollback;
  return s;
}

// The smallest p from which feeding again pools every later window from
// rows the ring still holds: window w >= p / m needs positions
// [(w - overlap) m, (w + 1) m), and the ring holds [high - rows, high).
int64_t brute_floor(const DeviceCompressor& c) {
  const int64_t held_from = std::max<int64_t>(0, c.high - c.ring_rows);
  for (int64_t p = 0;; ++p) {
    const int64_t first_needed = std::max<int64_t>(0, (p / c.ratio - (c.overlap ? 1 : 0)) * c.ratio);
    if (first_needed >= held_from) return p;
  }
}

TEST(DeviceAttentionCache, FloorIsTheFirstPositionWhoseRowsAreHeld) {
  HostAllocator host;
  for (AttnKind kind : {AttnKind::hca, AttnKind::csa})
    for (int64_t ratio : {int64_t(4), int64_t(8), int64_t(128)})
      for (int64_t rollback : {int64_t(0), int64_t(16), int64_t(100)}) {
        const AttentionWeights w = layer(kind, ratio, 16);
        DeviceAttentionCache c(host, &w, shape(8, rollback));
        for (int64_t high = 0; high < 3 * c.comp.ring_rows + 2 * ratio; ++high) {
          c.position = c.comp.high = high;
          const int64_t want = brute_floor(c.comp);
          ASSERT_EQ(c.comp.truncate_floor(), want) << "ratio " << ratio << " high " << high;
          // Steady decode (nothing truncated): a rollback of `rollback` tokens is free.
          ASSERT_LE(want, std::max<int64_t>(0, high - rollback)) << "ratio " << ratio << " high " << high;
        }
      }
}

TEST(DeviceAttentionCache, TruncatesDownToTheDeepestFloorOnly) {
  HostAllocator host;
  const AttentionWeights w = layer(AttnKind::csa, 4, 16);
  DeviceAttentionCache c(host, &w, shape(8, 5));
  // As attend leaves it after 300 tokens.
  c.position = 300;
  c.comp.high = c.index.high = c.ring_high = 300;
  const int64_t floor = std::max({int64_t(300 - 5), c.comp.truncate_floor(), c.index.truncate_floor()});
  EXPECT_EQ(c.truncate_floor(), floor);
  EXPECT_THROW(c.truncate(floor - 1), Error);
  EXPECT_THROW(c.truncate(301), Error);
  c.truncate(floor);
  EXPECT_EQ(c.position, floor);
  EXPECT_EQ(c.comp.n_entries(c.position), floor / 4);
  EXPECT_EQ(c.index.n_entries(c.position), floor / 4);
  EXPECT_EQ(c.truncate_floor(), floor);  // the rings' contents did not move
}

TEST(DeviceAttentionCache, ClonesCopyEveryBufferAndEvolveApart) {
  HostAllocator host;
  const AttentionWeights w = layer(AttnKind::hca, 8, 16);
  auto a = std::make_unique<DeviceAttentionCache>(host, &w, shape(8, 2));
  a->reserve_entries(a->comp, 10);
  const int64_t ring_floats = a->ring_rows * 16, row_floats = a->comp.ring_rows * a->comp.width;
  for (int64_t i = 0; i < ring_floats; ++i) a->ring[i] = float(i);
  for (int64_t i = 0; i < row_floats; ++i) a->comp.kv[i] = float(2 * i), a->comp.score[i] = float(3 * i);
  for (int64_t i = 0; i < 10 * 16; ++i) a->comp.entries[i] = float(-i);
  a->position = a->comp.high = a->ring_high = 80;  // 10 entries
  const int before = host.copies;
  auto b_ptr = a->clone();
  auto& b = static_cast<DeviceAttentionCache&>(*b_ptr);
  EXPECT_EQ(host.copies - before, 4);  // ring, two row rings, entries
  EXPECT_EQ(b.position, 80);
  EXPECT_EQ(b.bytes(), a->bytes());
  EXPECT_EQ(b.comp.n_entries(b.position), 10);
  for (int64_t i = 0; i < ring_floats; ++i) ASSERT_EQ(b.ring[i], float(i));
  for (int64_t i = 0; i < row_floats; ++i) ASSERT_EQ(b.comp.score[i], float(3 * i));
  for (int64_t i = 0; i < 10 * 16; ++i) ASSERT_EQ(b.comp.entries[i], float(-i));
  EXPECT_NE(b.ring, a->ring);
  b.ring[0] = 7.0f;
  b.truncate(78);
  EXPECT_EQ(a->ring[0], 0.0f);
  EXPECT_EQ(a->position, 80);
}

TEST(DeviceAttentionCache, EntryBuffersGrowKeepingTheirEntries) {
  HostAllocator host;
  const AttentionWeights w = layer(AttnKind::hca, 4, 16);
  DeviceAttentionCache c(host, &w, shape(8, 2));
  c.reserve_entries(c.comp, 3);
  const int64_t first_capacity = c.comp.entry_capacity;
  EXPECT_GE(first_capacity, 3);
  for (int64_t i = 0; i < 3 * 16; ++i) c.comp.entries[i] = float(i) + 0.5f;
  c.position = 12;  // 3 entries
  c.reserve_entries(c.comp, first_capacity + 1);
  EXPECT_GT(c.comp.entry_capacity, first_capacity);
  for (int64_t i = 0; i < 3 * 16; ++i) ASSERT_EQ(c.comp.entries[i], float(i) + 0.5f);
  const uint64_t bytes = c.bytes();
  c.reserve_entries(c.comp, 2);  // no shrinking, no copy
  EXPECT_EQ(c.bytes(), bytes);
}

TEST(DeviceAttentionCache, TheCpuBackendRefusesIt) {
  HostAllocator host;
  const AttentionWeights w = layer(AttnKind::sliding, 0, 0);
  DeviceAttentionCache c(host, &w, shape(8, 2));
  try {
    host_attention_state(AttnSeq{&c, 0, 1, 0});
    FAIL() << "the CPU's attend took a device cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
