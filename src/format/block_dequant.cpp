// Dequantization of the block formats (the quantizers live in block_quant.cpp).
// Scales are decoded once per block; a NaN scale code is corrupt data and
// throws instead of spreading NaN through a matmul.
#include <algorithm>
#include <cmath>

#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

void check_row_length(int64_t n, int64_t block, const char* format) {
  if (n < 0 || n % block != 0)
    fail(format, " row of ", n, " elements: the length must be a multiple of ", block);
}

// Element i of a packed FP4 row: even elements in the low nibble.
inline uint8_t fp4_code(const uint8_t* packed, int64_t i) {
  uint8_t byte = packed[i / 2];
  return (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
}

}  // namespace

void mxfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n, float* y) {
  check_row_length(n, kMxfp4Block, "MXFP4");
  for (int64_t b = 0; b < n / kMxfp4Block; ++b) {
    if (scales[b] == 0xFF) fail("MXFP4 block ", b, " has the NaN scale code 0xFF");
    // E2M1 * 2^k is exact in f32 for every k in [-127, 127] (2^-128 and up
    // are representable, subnormals included), except 6 * 2^127 -> inf.
    const float scale = ue8m0_decode(scales[b]);
    for (int64_t i = b * kMxfp4Block; i < (b + 1) * kMxfp4Block; ++i)
      y[i] = e2m1_decode(fp4_code(packed, i)) * scale;
  }
}

void nvfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n,
                          float global_scale, float* y) {
  check_row_length(n, kNvfp4Block, "NVFP4");
  for (int64_t b = 0; b < n / kNvfp4Block; ++b) {
    if ((scales[b] & 0x7F) == 0x7F)
      fail("NVFP4 block ", b, " has the NaN scale code 0x", std::hex, int(scales[b]));
    // ModelOpt's NVFP4QTensor.dequantize order: the f32 product s_b * s_g
    // first, then code * that. ((code * s_b) * s_g rounds differently when
    // s_g has many mantissa bits.) It is also the divisor the quantizer
    // rounded against, so quantize -> dequantize is consistent.
    const float scale = e4m3_decode(scales[b]) * global_scale;
    for (int64_t i = b * kNvfp4Block; i < (b + 1) * kNvfp4Block; ++i)
      y[i] = e2m1_decode(fp4_code(packed, i)) * scale;
  }
}

void fp8_block_dequantize(const uint8_t* w, int64_t rows, int64_t cols, const void* scales,
                          Fp8ScaleType scale_type, float* y) {
  if (rows < 0 || cols < 0) fail("FP8 block tensor with negative shape [", rows, ", ", cols, "]");
  const int64_t scale_rows = (rows + kFp8Tile - 1) / kFp8Tile;
  const int64_t scale_cols = (cols + kFp8Tile - 1) / kFp8Tile;
  for (int64_t tr = 0; tr < scale_rows; ++tr) {
    for (int64_t tc = 0; tc < scale_cols; ++tc) {
      const int64_t s = tr * scale_cols + tc;
      float scale;
      if (scale_type == Fp8ScaleType::ue8m0) {
        uint8_t code = static_cast<const uint8_t*>(scales)[s];
        if (code == 0xFF) fail("FP8 block scale [", tr, ", ", tc, "] is the NaN code 0xFF");
        scale = ue8m0_decode(code);
      } else {
        scale = static_cast<const float*>(scales)[s];
        if (!std::isfinite(scale)) fail("FP8 block scale [", tr, ", ", tc, "] is ", scale);
      }
      const int64_t r_end = std::min(rows, (tr + 1) * kFp8Tile);
      const int64_t c_end = std::min(cols, (tc + 1) * kFp8Tile);
      for (int64_t r = tr * kFp8Tile; r < r_end; ++r)
        for (int64_t c = tc * kFp8Tile; c < c_end; ++c)
          y[r * cols + c] = e4m3_decode(w[r * cols + c]) * scale;
    }
  }
}

}  // namespace nibble
