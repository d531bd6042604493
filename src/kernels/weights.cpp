#include "kernels/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

// The index of the first byte c of p[0, n) with (c | set) == 0xFF, or -1:
// set = 0x00 finds the UE8M0 NaN 0xFF, set = 0x80 the E4M3 NaNs 0x7F / 0xFF.
// Runs at bind time over every scale byte (~400 MB for two Flash layers), so
// it tests eight bytes per step: v = ~(w | set * 0x01..01) has a zero byte
// exactly where c | set == 0xFF, and (v - 0x01..01) & ~v & 0x80..80 is
// nonzero iff v has a zero byte. A 4 KB block that hits is rescanned byte by
// byte for the index.
int64_t find_all_ones(const uint8_t* p, int64_t n, uint8_t set) {
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
  const uint64_t fill = kOnes * set;
  auto bad = [set](uint8_t c) { return uint8_t(c | set) == 0xFF; };
  for (int64_t base = 0; base < n; base += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - base);
    const uint8_t* q = p + base;
    uint64_t hit = 0;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      uint64_t w;
      std::memcpy(&w, q + i, 8);
      const uint64_t v = ~(w | fill);
      hit |= (v - kOnes) & ~v & kHighs;
    }
    for (; i < len; ++i) hit |= bad(q[i]);
    if (hit)
      for (i = 0; i < len; ++i)
        if (bad(q[i])) return base + i;
  }
  return -1;
}

constexpr uint8_t kUe8m0Nan = 0x00;  // set for find_all_ones: 0xFF
constexpr uint8_t kE4m3Nan = 0x80;   // set for find_all_ones: 0x7F, 0xFF

}  // namespace

void check_weight_codes(const WeightView& w, bool fp8_codes) {
  if (w.rows <= 0 || w.cols <= 0) return;
  auto where = [&](int64_t i, int64_t per_row) {
    return "[" + std::to_string(i / per_row) + ", " + std::to_string(i % per_row) + "]";
  };
  switch (w.format) {
    case Format::mxfp4: {
      const int64_t per_row = w.cols / kMxfp4Block;
      if (int64_t i = find_all_ones(w.scales, w.rows * per_row, kUe8m0Nan); i >= 0)
        fail("tensor ", w.name, ": MXFP4 scale ", where(i, per_row), " is the UE8M0 NaN code 0xFF");
      return;
    }
    case Format::nvfp4: {
      const int64_t per_row = w.cols / kNvfp4Block;
      if (int64_t i = find_all_ones(w.scales, w.rows * per_row, kE4m3Nan); i >= 0)
        fail("tensor ", w.name, ": NVFP4 scale ", where(i, per_row), " is an E4M3 NaN code (0x",
             w.scales[i] == 0xFF ? "FF" : "7F", ")");
      if (!std::isfinite(w.global_scale) || !(w.global_scale > 0.0f))
        fail("tensor ", w.name, ": NVFP4 global scale ", w.global_scale, " is not a positive finite number");
      return;
    }
    case Format::fp8_block128: {
      const int64_t per_row = (w.cols + kFp8Tile - 1) / kFp8Tile;
      const int64_t tiles = (w.rows + kFp8Tile - 1) / kFp8Tile * per_row;
      if (w.fp8_scale == Fp8ScaleType::ue8m0) {
        if (int64_t i = find_all_ones(w.scales, tiles, kUe8m0Nan); i >= 0)
          fail("tensor ", w.name, ": FP8 tile scale ", where(i, per_row), " is the UE8M0 NaN code 0xFF");
      } else {
        for (int64_t i = 0; i < tiles; ++i) {
          float s;
          std::memcpy(&s, w.scales + 4 * i, 4);
          if (!std::isfinite(s)) fail("tensor ", w.name, ": FP8 tile scale ", where(i, per_row), " is ", s);
        }
      }
      if (fp8_codes)
        if (int64_t i = find_all_ones(w.data, w.rows * w.cols, kE4m3Nan); i >= 0)
          fail("tensor ", w.name, ": FP8 weight ", where(i, w.cols), " is an E4M3 NaN code");
      return;
    }
    case Format::int4: {
      // A BF16 scale whose exponent bits are all ones is Inf or NaN.
      const int64_t per_row = w.cols / w.group;
      const auto* s = reinterpret_cast<const uint16_t*>(w.scales);
      for (int64_t i = 0; i < w.rows * per_row; ++i)
        if ((s[i] & 0x7F80) == 0x7F80)
          fail("tensor ", w.name, ": INT4 scale ", where(i, per_row), " is a BF16 ", (s[i] & 0x7F) ? "NaN" : "infinity");
      return;
    }
    case Format::bf16:
    case Format::f32:
    case Format::int_index:
      return;  // the kernels compute with these values as they are (NaN stays NaN)
  }
}

}  // namespace nibble
