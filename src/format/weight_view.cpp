#include "format/weight_view.h"

#include "format/element.h"
#include "format/int4.h"
#include "util/error.h"

namespace nibble {

uint64_t WeightView::bytes() const {
  const uint64_t n = uint64_t(rows) * uint64_t(cols);
  switch (format) {
    case Format::mxfp4: return n / 2 + n / kMxfp4Block;
    case Format::nvfp4: return n / 2 + n / kNvfp4Block + 4;
    case Format::fp8_block128: {
      uint64_t tiles = uint64_t((rows + kFp8Tile - 1) / kFp8Tile) * uint64_t((cols + kFp8Tile - 1) / kFp8Tile);
      return n + tiles * (fp8_scale == Fp8ScaleType::f32 ? 4 : 1);
    }
    case Format::bf16: return n * 2;
    case Format::f32: return n * 4;
    case Format::int4: return n / 2 + (group > 0 ? n / uint64_t(group) * 2 : 0);
    case Format::int_index: return n * 8;
  }
  return n;
}

void dequantize_row(const WeightView& w, int64_t r, float* out) {
  const int64_t c = w.cols;
  switch (w.format) {
    case Format::mxfp4:
      mxfp4_dequantize_row(w.data + r * (c / 2), w.scales + r * (c / kMxfp4Block), c, out);
      return;
    case Format::nvfp4:
      nvfp4_dequantize_row(w.data + r * (c / 2), w.scales + r * (c / kNvfp4Block), c, w.global_scale, out);
      return;
    case Format::int4:
      int4_dequantize_row(w.data + r * (c / 2), reinterpret_cast<const uint16_t*>(w.scales) + r * (c / w.group), c,
                          w.group, out);
      return;
    case Format::fp8_block128: {
      const int64_t scale_cols = (c + kFp8Tile - 1) / kFp8Tile;
      const uint8_t* row = w.data + r * c;
      for (int64_t j = 0; j < c; ++j) {
        int64_t s = (r / kFp8Tile) * scale_cols + j / kFp8Tile;
        float scale = w.fp8_scale == Fp8ScaleType::ue8m0
                          ? ue8m0_decode(w.scales[s])
                          : reinterpret_cast<const float*>(w.scales)[s];
        out[j] = e4m3_decode(row[j]) * scale;
      }
      return;
    }
    case Format::bf16: {
      const uint8_t* row = w.data + r * c * 2;
      for (int64_t j = 0; j < c; ++j) {
        uint16_t h;
        std::memcpy(&h, row + 2 * j, 2);
        out[j] = bf16_decode(h);
      }
      return;
    }
    case Format::f32:
      std::memcpy(out, w.data + r * c * 4, size_t(c) * 4);
      return;
    case Format::int_index:
      break;
  }
  fail("tensor ", w.name, ": an integer index tensor is not a weight matrix");
}

}  // namespace nibble
