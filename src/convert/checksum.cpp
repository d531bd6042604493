#include "convert/checksum.h"

#include <algorithm>
#include <cstring>

namespace nibble {

namespace {

constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr uint64_t kMulB = 0xC2B2AE3D27D4EB4Full;  // a large odd constant with mixed bits

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Final avalanche so that every input bit affects every digest bit.
inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulA;
  h ^= h >> 32;
  return h;
}

}  // namespace

void StreamHash::absorb(const uint8_t* p, size_t stripes) {
  // Local copies let the compiler keep the sums in vector registers.
  uint64_t a0 = a_[0], a1 = a_[1], a2 = a_[2], a3 = a_[3];
  uint64_t b0 = b_[0], b1 = b_[1], b2 = b_[2], b3 = b_[3];
  for (size_t s = 0; s < stripes; ++s, p += 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);  // little-endian words, the file's byte order on x86-64
    a0 += w[0];
    a1 += w[1];
    a2 += w[2];
    a3 += w[3];
    b0 += a0;
    b1 += a1;
    b2 += a2;
    b3 += a3;
  }
  a_[0] = a0, a_[1] = a1, a_[2] = a2, a_[3] = a3;
  b_[0] = b0, b_[1] = b1, b_[2] = b2, b_[3] = b3;
}

void StreamHash::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  length_ += n;
  if (tail_len_ > 0) {
    size_t take = std::min(n, sizeof tail_ - tail_len_);
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < sizeof tail_) return;
    absorb(tail_, 1);
    tail_len_ = 0;
  }
  absorb(p, n / 32);
  p += n / 32 * 32;
  n %= 32;
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t StreamHash::digest() const {
  // The unfinished stripe, zero-padded, goes in as one more stripe; the
  // length tells the padding apart from real zero bytes.
  StreamHash h = *this;
  if (h.tail_len_ > 0) {
    uint8_t last[32] = {};
    std::memcpy(last, h.tail_, h.tail_len_);
    h.absorb(last, 1);
  }
  uint64_t d = mix(length_ ^ kMulB);
  for (int i = 0; i < 4; ++i) {
    d = rotl(d ^ mix(h.a_[i] + uint64_t(i)), 23) * kMulA;
    d = rotl(d ^ mix(h.b_[i] ^ kMulB), 29) * kMulA;
  }
  return mix(d);
}

}  // namespace nibble
