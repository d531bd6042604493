#include "model/cuda_backend_memory.h"

#include <algorithm>

#include "util/error.h"

namespace nibble {

namespace {
// 256 bytes: the alignment cudaMalloc gives, so every slot starts where a
// vectorised kernel may load 16 bytes at a time.
constexpr size_t kAlignFloats = 64;
}  // namespace

StepArena::~StepArena() {
  for (Slot& s : slots_) a_->release(s.p);
}

float* StepArena::alloc(int64_t floats) {
  if (floats < 0) fail("step arena: a buffer of ", floats, " values");
  const size_t want = (size_t(floats) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  if (used_ == slots_.size()) slots_.emplace_back();
  Slot& s = slots_[used_++];
  if (s.floats < want || !s.p) {
    // Replaced, not resized: nothing of the step can still point into the
    // old memory (this slot was released or never handed out this step).
    float* p = static_cast<float*>(a_->allocate(std::max<size_t>(want, kAlignFloats) * sizeof(float)));
    a_->release(s.p);
    s.p = p;
    s.floats = std::max<size_t>(want, kAlignFloats);
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
  for (auto& [host, c] : map_) a_->release(c.p);
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
