#include "model/cuda_attention_cache.h"

#include <algorithm>

#include "util/error.h"

namespace nibble {

int64_t DeviceCompressor::truncate_floor() const {
  if (ratio == 0) return 0;
  const int64_t held_from = std::max<int64_t>(0, high - ring_rows);
  if (held_from == 0) return 0;
  // Feeding again from p pools window p / m first, which reads rows from
  // (p / m - (CSA: 1)) m on: the smallest p whose rows start at or after held_from.
  return (held_from + ratio - 1) / ratio * ratio + (overlap ? ratio : 0);
}

DeviceAttentionCache::DeviceAttentionCache(DeviceAllocator& a, const AttentionWeights* w, const AttentionShape& s)
    : a_(&a), w_(w), s_(s) {
  if (s.window <= 0 || s.head_dim <= 0 || s.rollback < 0)
    fail("attention cache: window ", s.window, ", head_dim ", s.head_dim, ", rollback ", s.rollback);
  ring_rows = s.window + s.rollback;
  ring = floats(ring_rows * s.head_dim);
  if (w->compressor) init_compressor(comp, *w->compressor);
  if (w->indexer) init_compressor(index, w->indexer->compressor);
}

DeviceAttentionCache::~DeviceAttentionCache() {
  a_->release(ring);
  free_compressor(comp);
  free_compressor(index);
}

float* DeviceAttentionCache::floats(int64_t n) const {
  return static_cast<float*>(a_->allocate(size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
}

void DeviceAttentionCache::init_compressor(DeviceCompressor& c, const CompressorWeights& w) {
  if (w.ratio <= 0 || w.dim <= 0) fail("attention cache: a compressor of ratio ", w.ratio, " and width ", w.dim);
  c.ratio = w.ratio;
  c.dim = w.dim;
  c.width = w.width();
  c.overlap = w.overlap;
  c.ring_rows = std::max(kPiece, s_.rollback) + (w.overlap ? 2 : 1) * w.ratio;
  c.kv = floats(c.ring_rows * c.width);
  c.score = floats(c.ring_rows * c.width);
}

void DeviceAttentionCache::free_compressor(DeviceCompressor& c) {
  a_->release(c.kv);
  a_->release(c.score);
  a_->release(c.entries);
  c.kv = c.score = c.entries = nullptr;
}

void DeviceAttentionCache::copy_compressor(DeviceCompressor& to, const DeviceCompressor& from) const {
  if (from.ratio == 0) return;
  const size_t rows = size_t(from.ring_rows * from.width) * sizeof(float);
  a_->copy(to.kv, from.kv, rows);
  a_->copy(to.score, from.score, rows);
  const int64_t n = from.n_entries(position);
  if (n > 0) {
    to.entries = floats(from.entry_capacity * from.dim);
    to.entry_capacity = from.entry_capacity;
    a_->copy(to.entries, from.entries, size_t(n * from.dim) * sizeof(float));
  }
  to.high = from.high;
}

std::unique_ptr<AttentionCache> DeviceAttentionCache::clone() const {
  auto c = std::make_unique<DeviceAttentionCache>(*a_, w_, s_);
  a_->copy(c->ring, ring, size_t(ring_rows * s_.head_dim) * sizeof(float));
  c->position = position;
  c->ring_high = ring_high;
  copy_compressor(c->comp, comp);
  copy_compressor(c->index, index);
  return c;
}

int64_t DeviceAttentionCache::truncate_floor() const {
  int64_t floor = std::max<int64_t>(0, ring_high - s_.rollback);
  floor = std::max(floor, comp.truncate_floor());
  return std::max(floor, index.truncate_floor());
}

void DeviceAttentionCache::truncate(int64_t p) {
  if (p < truncate_floor() || p > position)
    fail("attention cache: cannot truncate to position ", p, " (holds ", truncate_floor(), " .. ", position, ")");
  // The window ring keeps its rows: a query at p reads positions before p only.
  position = p;
}

uint64_t DeviceAttentionCache::bytes() const {
  auto of = [](const DeviceCompressor& c) {
    return c.ratio ? sizeof(float) * uint64_t(2 * c.ring_rows * c.width + c.entry_capacity * c.dim) : 0;
  };
  return sizeof(float) * uint64_t(ring_rows * s_.head_dim) + of(comp) + of(index);
}

void DeviceAttentionCache::reserve_entries(DeviceCompressor& c, int64_t n) {
  if (n <= c.entry_capacity) return;
  int64_t cap = std::max<int64_t>(64, c.entry_capacity);
  while (cap < n) cap *= 2;
  float* fresh = floats(cap * c.dim);
  const int64_t keep = std::min(c.n_entries(position), c.entry_capacity);
  if (keep > 0) a_->copy(fresh, c.entries, size_t(keep * c.dim) * sizeof(float));
  a_->release(c.entries);
  c.entries = fresh;
  c.entry_capacity = cap;
}

}  // namespace nibble
