#include "model/cuda_backend_memory.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace nibble {

namespace {
// 256 bytes: the alignment cudaMalloc gives, so every slot starts where a
// vectorised kernel may load 16 bytes at a time.
constexpr size_t kAlignFloats = 64;
}  // namespace

namespace {
constexpr size_t kStageAlign = 16;
constexpr size_t kMinStageBlock = size_t(64) << 10;
}  // namespace

StagingArena::~StagingArena() {
  for (Block& b : blocks_) a_->release(b.p);
}

StagingArena::Block StagingArena::make_block(size_t size) {
  Block b;
  b.size = std::max(size, kMinStageBlock);
  b.p = static_cast<uint8_t*>(a_->allocate(b.size));
  return b;
}

const void* StagingArena::stage(const void* src, size_t bytes) {
  const size_t at = blocks_.empty() ? 0 : (blocks_.back().used + kStageAlign - 1) / kStageAlign * kStageAlign;
  if (blocks_.empty() || at + bytes > blocks_.back().size) {
    // Earlier blocks stay: uploads queued from them may not have run yet.
    blocks_.push_back(make_block(std::max(bytes, blocks_.empty() ? size_t(0) : 2 * blocks_.back().size)));
    return stage(src, bytes);
  }
  Block& b = blocks_.back();
  if (bytes) std::memcpy(b.p + at, src, bytes);
  b.used = at + bytes;
  staged_ += bytes;
  return b.p + at;
}

void StagingArena::reset() {
  if (blocks_.size() > 1) {
    size_t total = 0;
    for (Block& b : blocks_) {
      total += b.size;
      a_->release(b.p);
    }
    blocks_.clear();
    blocks_.push_back(make_block(total));
  }
  if (!blocks_.empty()) blocks_.back().used = 0;
  staged_ = 0;
}

uint64_t StagingArena::bytes() const {
  uint64_t n = 0;
  for (const Block& b : blocks_) n += b.size;
  return n;
}

StepArena::~StepArena() {
  for (Slot& s : slots_) a_->release(s.p);
}

float* StepArena::alloc(int64_t floats) {
  if (floats < 0) fail("step arena: a buffer of ", floats, " values");
  auto aligned = [](size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; };
  const size_t want = aligned(size_t(floats));
  if (used_ == slots_.size()) slots_.emplace_back();
  Slot& s = slots_[used_++];
  if (s.floats < want || !s.p) {
    // Replaced, not resized: nothing of the step can still point into the
    // old memory (this slot was released or never handed out this step).
    // A slot that grows again grows by half at least: decode's buffers that
    // follow the context (the indexer's scores, the attention logits over
    // HCA's entries) would otherwise grow every few hundred tokens, each
    // time a free (which synchronises the device and ends a step graph's
    // capture); so they grow a logarithmic number of times.
    size_t floats = std::max(want, kAlignFloats);
    if (s.p) floats = std::max(floats, aligned(s.floats + s.floats / 2));
    float* p = static_cast<float*>(a_->allocate(floats * sizeof(float)));
    a_->release(s.p);
    s.p = p;
    s.floats = floats;
    ++growths_;
  }
  return s.p;
}

void StepArena::release_to(size_t mark) {
  if (mark > used_) fail("step arena: release_to(", mark, ") past the ", used_, " buffers in use");
  used_ = mark;
}

uint64_t StepArena::bytes() const {
  uint64_t b = 0;
  for (const Slot& s : slots_) b += s.floats * sizeof(float);
  return b;
}

WeightMirror::~WeightMirror() {
  for (auto& [host, c] : map_)
    if (c.owned) a_->release(c.p);
}

void WeightMirror::adopt(const void* host, size_t bytes, const void* device) {
  if (!host || !device) fail("cuda backend: adopting a null weight copy");
  if (!map_.emplace(host, Copy{const_cast<void*>(device), bytes, false}).second)
    fail("cuda backend: the weight at this host address has a device copy already");
}

const void* WeightMirror::device(const void* host, size_t bytes, const char* what) {
  if (!host) return nullptr;
  auto it = map_.find(host);
  if (it != map_.end()) {
    if (it->second.bytes != bytes)
      fail("cuda backend: ", what, " at one host address asked for as ", bytes, " bytes, uploaded as ",
           it->second.bytes);
    return it->second.p;
  }
  void* p = a_->allocate(bytes);
  a_->upload(p, host, bytes);
  map_.emplace(host, Copy{p, bytes});
  bytes_ += bytes;
  return p;
}

}  // namespace nibble
