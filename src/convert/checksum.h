// A fast non-cryptographic 64-bit checksum of a byte stream, used by
// `nibble convert` to check that what landed on disk is what it wrote: the
// digest is taken while the shard is streamed out and again when the
// finished file is read back. It guards against torn or misdirected writes
// and bad media, not against an adversary.
//
// Four independent 64-bit lanes each absorb one 8-byte word of every
// 32-byte stripe (multiply, rotate, multiply), so the multiplies pipeline
// and the hash runs faster than memory bandwidth. The digest depends only on
// the bytes and their order, never on how the stream was split into
// update() calls.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nibble {

class StreamHash {
 public:
  void update(const void* data, size_t n);
  uint64_t digest() const;  // of everything so far; update() may continue after
  uint64_t length() const { return length_; }

 private:
  void absorb_stripe(const uint8_t* p);

  uint64_t lane_[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                       0x082EFA98EC4E6C89ull};  // digits of pi: arbitrary, distinct
  uint8_t tail_[32] = {};                       // bytes of an unfinished stripe
  size_t tail_len_ = 0;
  uint64_t length_ = 0;
};

}  // namespace nibble
