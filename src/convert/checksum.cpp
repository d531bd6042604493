#include "convert/checksum.h"

#include <algorithm>
#include <cstring>

namespace nibble {

namespace {

constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr uint64_t kMulB = 0xC2B2AE3D27D4EB4Full;  // a large odd constant with mixed bits

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // x86-64 is little-endian, which is the file order
  return v;
}

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

void StreamHash::absorb_stripe(const uint8_t* p) {
  for (int i = 0; i < 4; ++i) {
    uint64_t w = load_le64(p + 8 * i);
    lane_[i] = rotl(lane_[i] + w * kMulB, 31) * kMulA;
  }
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
    absorb_stripe(tail_);
    tail_len_ = 0;
  }
  while (n >= 32) {
    absorb_stripe(p);
    p += 32;
    n -= 32;
  }
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t StreamHash::digest() const {
  uint64_t h = rotl(lane_[0], 1) + rotl(lane_[1], 7) + rotl(lane_[2], 12) + rotl(lane_[3], 18);
  for (int i = 0; i < 4; ++i) h = (h ^ mix(lane_[i])) * kMulA + kMulB;
  // The unfinished stripe, zero-padded; the length below tells the padding
  // apart from real zero bytes.
  uint8_t last[32] = {};
  std::memcpy(last, tail_, tail_len_);
  for (int i = 0; i < 4; ++i) h = rotl(h ^ mix(load_le64(last + 8 * i) + uint64_t(i)), 27) * kMulA;
  return mix(h ^ length_);
}

}  // namespace nibble
