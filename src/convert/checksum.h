// A fast non-cryptographic 64-bit checksum of a byte stream, used by
// `nibble convert` to check that what landed on disk is what it wrote: the
// digest is taken while a shard is streamed out and again when the finished
// file is read back. It guards against torn, lost or misdirected writes and
// bad media, not against an adversary.
//
// Fletcher-style over 64-bit words in four lanes: per 32-byte stripe each
// lane adds its word to a running sum a, and a to a second sum b, so b
// weighs every word by its position and moved or swapped data changes it.
// Adds only, so the compiler vectorizes it and the checksum runs several
// times faster than memory bandwidth (the shard data is read twice per
// conversion, so this is on the critical path). The digest depends only on
// the bytes and their order, never on how the stream was split into update()
// calls; a final mix spreads every sum bit over the digest.
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
  void absorb(const uint8_t* p, size_t stripes);

  uint64_t a_[4] = {1, 2, 3, 4};  // running sums of the words of each lane
  uint64_t b_[4] = {0, 0, 0, 0};  // running sums of a_: position-weighted
  uint8_t tail_[32] = {};         // bytes of an unfinished stripe
  size_t tail_len_ = 0;
  uint64_t length_ = 0;
};

}  // namespace nibble
