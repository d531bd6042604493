// Dequantization of the block formats (the quantizers live in block_quant.cpp).
#include <cmath>

#include "format/block.h"
#include "format/element.h"

namespace nibble {

void mxfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t byte = packed[i / 2];
    uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    y[i] = e2m1_decode(code) * ue8m0_decode(scales[i / kMxfp4Block]);
  }
}

void nvfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n,
                          float global_scale, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t byte = packed[i / 2];
    uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    // ModelOpt's order: (code * s_b) * s_g, in f32.
    y[i] = (e2m1_decode(code) * e4m3_decode(scales[i / kNvfp4Block])) * global_scale;
  }
}

void fp8_block_dequantize(const uint8_t* w, int64_t rows, int64_t cols, const void* scales,
                          Fp8ScaleType scale_type, float* y) {
  const int64_t scale_cols = (cols + kFp8Tile - 1) / kFp8Tile;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      int64_t s = (r / kFp8Tile) * scale_cols + c / kFp8Tile;
      float scale = scale_type == Fp8ScaleType::ue8m0
                        ? ue8m0_decode(static_cast<const uint8_t*>(scales)[s])
                        : static_cast<const float*>(scales)[s];
      y[r * cols + c] = e4m3_decode(w[r * cols + c]) * scale;
    }
  }
}

}  // namespace nibble
