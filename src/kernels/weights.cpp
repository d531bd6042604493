#include "kernels/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

// The index of the first byte of p[0, n) for which bad(byte) holds, or -1.
// One branch-free pass per 4 KB so the compiler vectorizes the test.
template <class Bad>
int64_t find_byte(const uint8_t* p, int64_t n, Bad bad) {
  for (int64_t base = 0; base < n; base += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - base);
    bool any = false;
    for (int64_t i = 0; i < len; ++i) any |= bad(p[base + i]);
    if (any)
      for (int64_t i = 0; i < len; ++i)
        if (bad(p[base + i])) return base + i;
  }
  return -1;
}

bool e4m3_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }
bool ue8m0_nan(uint8_t c) { return c == 0xFF; }

}  // namespace

void check_weight_codes(const WeightView& w, bool fp8_codes) {
  if (w.rows <= 0 || w.cols <= 0) return;
  auto where = [&](int64_t i, int64_t per_row) {
    return "[" + std::to_string(i / per_row) + ", " + std::to_string(i % per_row) + "]";
  };
  switch (w.format) {
    case Format::mxfp4: {
      const int64_t per_row = w.cols / kMxfp4Block;
      if (int64_t i = find_byte(w.scales, w.rows * per_row, ue8m0_nan); i >= 0)
        fail("tensor ", w.name, ": MXFP4 scale ", where(i, per_row), " is the UE8M0 NaN code 0xFF");
      return;
    }
    case Format::nvfp4: {
      const int64_t per_row = w.cols / kNvfp4Block;
      if (int64_t i = find_byte(w.scales, w.rows * per_row, e4m3_nan); i >= 0)
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
        if (int64_t i = find_byte(w.scales, tiles, ue8m0_nan); i >= 0)
          fail("tensor ", w.name, ": FP8 tile scale ", where(i, per_row), " is the UE8M0 NaN code 0xFF");
      } else {
        for (int64_t i = 0; i < tiles; ++i) {
          float s;
          std::memcpy(&s, w.scales + 4 * i, 4);
          if (!std::isfinite(s)) fail("tensor ", w.name, ": FP8 tile scale ", where(i, per_row), " is ", s);
        }
      }
      if (fp8_codes)
        if (int64_t i = find_byte(w.data, w.rows * w.cols, e4m3_nan); i >= 0)
          fail("tensor ", w.name, ": FP8 weight ", where(i, w.cols), " is an E4M3 NaN code");
      return;
    }
    case Format::bf16:
    case Format::f32:
    case Format::int_index:
      return;  // the kernels compute with these values as they are (NaN stays NaN)
  }
}

}  // namespace nibble
