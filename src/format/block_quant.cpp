// Quantization into the block formats (the dequantizers live in
// block_dequant.cpp, the MXFP4 <-> NVFP4 casts in cast.cpp).
//
// Every quantizer here does the same three steps per block: find amax
// (rejecting NaN / infinity, which would poison the scale of the whole
// block), derive the block scale from it in the format's own arithmetic,
// then round each element divided by that scale. The arithmetic is f32 and in
// the order the reference implementation uses it, because a different order
// rounds differently and would break bit-exact agreement with checkpoints
// written by those tools.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

void check_row_length(int64_t n, int64_t block, const char* format) {
  if (n < 0 || n % block != 0)
    fail(format, " row of ", n, " elements: the length must be a multiple of ", block);
}

// Largest |x[i]| over [begin, end); NaN and infinity are caller errors.
float block_amax(const float* x, int64_t begin, int64_t end, const char* format) {
  float amax = 0;
  for (int64_t i = begin; i < end; ++i) {
    float a = std::fabs(x[i]);
    if (!(a <= FLT_MAX))
      fail("cannot quantize ", x[i], " (element ", i, ") to ", format,
           ": NaN and infinity have no block scale");
    amax = std::max(amax, a);
  }
  return amax;
}

// floor(log2(a)) and ceil(log2(a)) for finite a > 0, exact (subnormals
// included): frexp gives a = m * 2^e with m in [0.5, 1).
int floor_log2(float a) {
  int e;
  std::frexp(a, &e);
  return e - 1;
}
int ceil_log2(float a) {
  int e;
  float m = std::frexp(a, &e);
  return m == 0.5f ? e - 1 : e;
}

// Packs the E2M1 codes of y[0..2*pairs) into pairs bytes, even element low.
template <class Encode>
inline void pack_fp4(int64_t pairs, uint8_t* packed, Encode encode) {
  for (int64_t j = 0; j < pairs; ++j)
    packed[j] = uint8_t(encode(2 * j) | (encode(2 * j + 1) << 4));
}

}  // namespace

// ---- MXFP4 --------------------------------------------------------------------

void mxfp4_quantize_row(const float* x, int64_t n, uint8_t* packed, uint8_t* scales) {
  check_row_length(n, kMxfp4Block, "MXFP4");
  for (int64_t b = 0; b < n / kMxfp4Block; ++b) {
    const float* xb = x + b * kMxfp4Block;
    const float amax = block_amax(x, b * kMxfp4Block, (b + 1) * kMxfp4Block, "MXFP4");
    // 2 is E2M1's largest exponent (6 = 1.5 * 2^2): amax / 2^k lands in
    // [4, 8), so the top of the block uses the top binade of E2M1 and only
    // values in (6, 8) saturate. An all-zero block takes 2^0 (see block.h).
    int k = amax > 0 ? std::clamp(floor_log2(amax) - 2, -127, 127) : 0;
    scales[b] = uint8_t(k + 127);
    // 2^-k is an f32 for every k in [-127, 127], so x * 2^-k is exactly
    // x / 2^k except where the result is an f32 subnormal (< 2^-126), and
    // those all round to E2M1 zero anyway.
    const float inv = std::ldexp(1.0f, -k);
    pack_fp4(kMxfp4Block / 2, packed + b * (kMxfp4Block / 2),
             [&](int64_t i) { return e2m1_encode(xb[i] * inv); });
  }
}

// ---- NVFP4 --------------------------------------------------------------------

float nvfp4_global_scale(float amax) {
  if (!(amax >= 0) || !std::isfinite(amax))
    fail("NVFP4 global scale: amax ", amax, " must be finite and >= 0");
  // ModelOpt: amax.float() / (6.0 * 448.0); the constant is 2688 exactly.
  return amax / 2688.0f;
}

void nvfp4_quantize_row(const float* x, int64_t n, float global_scale, uint8_t* packed,
                        uint8_t* scales) {
  check_row_length(n, kNvfp4Block, "NVFP4");
  if (!(global_scale >= 0) || !std::isfinite(global_scale))
    fail("NVFP4 global scale ", global_scale, " must be finite and >= 0");
  // ModelOpt computes per_block_amax / (6.0 * weights_scaling_factor_2): the
  // product is one f32 rounding, the quotient another. amax / 6 / s_g would
  // round differently.
  const float six_sg = 6.0f * global_scale;
  for (int64_t b = 0; b < n / kNvfp4Block; ++b) {
    const float* xb = x + b * kNvfp4Block;
    uint8_t* pb = packed + b * (kNvfp4Block / 2);
    const float amax = block_amax(x, b * kNvfp4Block, (b + 1) * kNvfp4Block, "NVFP4");
    // ModelOpt sets a zero per-block scale to 1.0 before the E4M3 cast. (A
    // zero amax is tested first so that s_g == 0 never makes 0 / 0.)
    float s_b = amax > 0 ? amax / six_sg : 0.0f;
    if (s_b == 0) s_b = 1.0f;
    scales[b] = e4m3_encode(s_b);  // saturates at 448 when s_g is too small
    const float s_b_value = e4m3_decode(scales[b]);
    if (amax == 0 || s_b_value == 0) {
      // All-zero block, or s_b below E4M3's smallest subnormal: every value
      // is 0 whatever the codes, and formats.md asks for zero codes.
      std::fill(pb, pb + kNvfp4Block / 2, uint8_t(0));
      continue;
    }
    // ModelOpt divides by the product (E4M3(s_b) as f32) * s_g, in f32.
    const float denom = s_b_value * global_scale;
    if (!(denom > 0))
      fail("NVFP4 block ", b, ": global scale ", global_scale,
           " is too small for a block with amax ", amax, " (scale product underflows)");
    // An exact zero encodes as +0 (code 0) whatever its sign, because
    // ModelOpt's sign bit is (x < 0); -0 stays 0x0 in checkpoints it writes.
    pack_fp4(kNvfp4Block / 2, pb, [&](int64_t i) -> uint8_t {
      return xb[i] == 0 ? uint8_t(0) : e2m1_encode(xb[i] / denom);
    });
  }
}

// ---- FP8 block-128 --------------------------------------------------------------

void fp8_block_quantize(const float* x, int64_t rows, int64_t cols, Fp8ScaleType scale_type,
                        uint8_t* w, void* scales) {
  if (rows < 0 || cols < 0) fail("FP8 block tensor with negative shape [", rows, ", ", cols, "]");
  const int64_t scale_rows = (rows + kFp8Tile - 1) / kFp8Tile;
  const int64_t scale_cols = (cols + kFp8Tile - 1) / kFp8Tile;
  for (int64_t tr = 0; tr < scale_rows; ++tr) {
    for (int64_t tc = 0; tc < scale_cols; ++tc) {
      // Tiles at the right and bottom edges are partial: [r0, r_end) x [c0, c_end).
      const int64_t r0 = tr * kFp8Tile, r_end = std::min(rows, r0 + kFp8Tile);
      const int64_t c0 = tc * kFp8Tile, c_end = std::min(cols, c0 + kFp8Tile);
      float amax = 0;
      for (int64_t r = r0; r < r_end; ++r) {
        float a = block_amax(x + r * cols, c0, c_end, "FP8 E4M3");
        amax = std::max(amax, a);
      }
      float scale = 1.0f;  // all-zero tile: neutral scale, zero codes
      if (amax > 0) {
        // s = amax / 448 (f32). It underflows to 0 only for amax below
        // 448 * 2^-150; the smallest positive f32 then still maps every
        // element to <= 448.
        float s = std::max(amax / 448.0f, std::numeric_limits<float>::denorm_min());
        if (scale_type == Fp8ScaleType::ue8m0) {
          // The smallest power of two >= s, so amax / scale <= 448 and the
          // scale is exact in E8M0. (DeepSeek's kernels compute
          // ceil(log2(amax * f32(1/448))) from the bits; for f32 amax the two
          // agree, including at amax = 448 * 2^k where both give 2^k.)
          scale = std::ldexp(1.0f, std::clamp(ceil_log2(s), -127, 127));
        } else {
          scale = s;
        }
      }
      const int64_t s_index = tr * scale_cols + tc;
      if (scale_type == Fp8ScaleType::ue8m0)
        static_cast<uint8_t*>(scales)[s_index] = uint8_t(floor_log2(scale) + 127);
      else
        static_cast<float*>(scales)[s_index] = scale;
      // Division, not multiplication by 1/scale: for f32 scales the two round
      // differently, and the reference (DeepSeek's x / s) divides.
      for (int64_t r = r0; r < r_end; ++r)
        for (int64_t c = c0; c < c_end; ++c) w[r * cols + c] = e4m3_encode(x[r * cols + c] / scale);
    }
  }
}

}  // namespace nibble
