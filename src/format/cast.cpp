// MXFP4 <-> NVFP4 conversion without a round trip through bf16.
//
// MXFP4 -> NVFP4 (formats.md, "lossless cast"): an MX block j is E2M1 codes
// times 2^k_j. NVFP4 multiplies the same codes by s_b * s_g; with
// s_g = 2^(k_max - 8) and s_b = 2^(k_j - k_max + 8) the product is 2^k_j
// again, and s_b is exactly representable in E4M3 as long as it lies in
// [2^-9, 2^8] (2^-9 is E4M3's smallest subnormal, 2^8 a normal below 448),
// i.e. k_max - k_j in [0, 17]. Inside that window the packed nibbles are
// copied unchanged; outside it the block's exact values are re-quantized
// with the ordinary NVFP4 quantizer, which loses them (they are more than
// 2^17 times smaller than the tensor's largest block) and is counted.
//
// NVFP4 -> MXFP4 has no such window: two halves with unrelated E4M3 scales
// and an f32 s_g rarely share a power of two, so every 32-block is
// dequantized and re-quantized.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

constexpr int kCastWindow = 17;  // largest k_max - k_j that E4M3 represents exactly

// The E4M3 code of 2^e for e in [-9, 8], without going through a float
// encoder (this runs once per MX block of a 150 GB checkpoint): normals
// (e >= -6) are exponent field e + 7 with a zero mantissa; 2^-7 .. 2^-9 are
// the subnormals m * 2^-9 with m = 4, 2, 1.
constexpr uint8_t e4m3_power_of_two(int e) { return e >= -6 ? uint8_t((e + 7) << 3) : uint8_t(1 << (e + 9)); }

void check_shape(int64_t rows, int64_t cols, const char* what) {
  if (rows < 0 || cols < 0 || cols % kMxfp4Block != 0)
    fail(what, ": tensor shape [", rows, ", ", cols, "] needs rows >= 0 and cols a multiple of ",
         kMxfp4Block);
}

void check_k_max(int k_max) {
  if (k_max < -127 || k_max > 127)
    fail("MXFP4 -> NVFP4: k_max ", k_max, " is outside the UE8M0 exponent range [-127, 127]");
}

// Largest |a[i] - b[i]| over n elements; equal values (inf == inf included,
// which MX block 2^127 can produce) count as 0.
double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace

int mxfp4_max_exponent(const uint8_t* scales, int64_t count) {
  if (count <= 0) fail("MXFP4 max exponent of ", count, " scales: need at least one");
  int k_max = -127;
  for (int64_t i = 0; i < count; ++i) {
    if (scales[i] == 0xFF) fail("MXFP4 scale ", i, " is the NaN code 0xFF");
    k_max = std::max(k_max, int(scales[i]) - 127);
  }
  return k_max;
}

float mxfp4_to_nvfp4_global_scale(int k_max) {
  check_k_max(k_max);
  // 2^(k_max - 8) >= 2^-135: an f32 subnormal at worst, still exact.
  return std::ldexp(1.0f, k_max - 8);
}

CastStats mxfp4_to_nvfp4(const uint8_t* mx_packed, const uint8_t* mx_scales, int64_t rows,
                         int64_t cols, int k_max, uint8_t* nv_packed, uint8_t* nv_scales) {
  check_shape(rows, cols, "MXFP4 -> NVFP4");
  check_k_max(k_max);
  const float s_g = mxfp4_to_nvfp4_global_scale(k_max);
  const int64_t mx_per_row = cols / kMxfp4Block;
  const int64_t bytes_per_block = kMxfp4Block / 2;  // 16 packed bytes, two NVFP4 halves
  CastStats stats;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < mx_per_row; ++b) {
      const uint8_t e = mx_scales[r * mx_per_row + b];
      if (e == 0xFF) fail("MXFP4 scale [", r, ", ", b, "] is the NaN code 0xFF");
      const int k = int(e) - 127;
      if (k > k_max)
        fail("MXFP4 -> NVFP4: block [", r, ", ", b, "] has exponent ", k, " above k_max ", k_max);
      const int64_t byte0 = r * (cols / 2) + b * bytes_per_block;
      const uint8_t* src = mx_packed + byte0;
      uint8_t* dst = nv_packed + byte0;
      uint8_t* dst_scales = nv_scales + r * (cols / kNvfp4Block) + 2 * b;
      ++stats.blocks;
      const int d = k_max - k;
      if (d <= kCastWindow) {
        std::memcpy(dst, src, bytes_per_block);
        // 2^(8 - d) for d in [0, 17] is one of E4M3's exact powers of two.
        dst_scales[0] = dst_scales[1] = e4m3_power_of_two(8 - d);
        ++stats.exact;
        continue;
      }
      // Outside the window: quantize the block's exact values ([32] f32).
      float values[kMxfp4Block], back[kMxfp4Block];
      mxfp4_dequantize_row(src, &e, kMxfp4Block, values);
      nvfp4_quantize_row(values, kMxfp4Block, s_g, dst, dst_scales);
      nvfp4_dequantize_row(dst, dst_scales, kMxfp4Block, s_g, back);
      stats.max_abs_error = std::max(stats.max_abs_error, max_abs_diff(values, back, kMxfp4Block));
      ++stats.requantized;
    }
  }
  return stats;
}

CastStats nvfp4_to_mxfp4(const uint8_t* nv_packed, const uint8_t* nv_scales, int64_t rows,
                         int64_t cols, float global_scale, uint8_t* mx_packed,
                         uint8_t* mx_scales) {
  check_shape(rows, cols, "NVFP4 -> MXFP4");
  if (!(global_scale >= 0) || !std::isfinite(global_scale))
    fail("NVFP4 -> MXFP4: global scale ", global_scale, " must be finite and >= 0");
  const int64_t mx_per_row = cols / kMxfp4Block;
  const int64_t nv_per_row = cols / kNvfp4Block;
  CastStats stats;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < mx_per_row; ++b) {
      const int64_t byte0 = r * (cols / 2) + b * (kMxfp4Block / 2);
      const uint8_t* src_scales = nv_scales + r * nv_per_row + 2 * b;
      for (int h = 0; h < 2; ++h)
        if ((src_scales[h] & 0x7F) == 0x7F)
          fail("NVFP4 scale [", r, ", ", 2 * b + h, "] is a NaN code");
      float values[kMxfp4Block], back[kMxfp4Block];
      nvfp4_dequantize_row(nv_packed + byte0, src_scales, kMxfp4Block, global_scale, values);
      for (int64_t i = 0; i < kMxfp4Block; ++i)
        if (!std::isfinite(values[i]))
          fail("NVFP4 -> MXFP4: element [", r, ", ", b * kMxfp4Block + i,
               "] dequantizes to ", values[i], " (global scale ", global_scale, " too large)");
      uint8_t* dst_scale = mx_scales + r * mx_per_row + b;
      mxfp4_quantize_row(values, kMxfp4Block, mx_packed + byte0, dst_scale);
      mxfp4_dequantize_row(mx_packed + byte0, dst_scale, kMxfp4Block, back);
      const double err = max_abs_diff(values, back, kMxfp4Block);
      stats.max_abs_error = std::max(stats.max_abs_error, err);
      ++stats.blocks;
      if (err == 0) ++stats.exact; else ++stats.requantized;
    }
  }
  return stats;
}

}  // namespace nibble
