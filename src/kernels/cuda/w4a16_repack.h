// Repacking MXFP4 / NVFP4 / INT4 (group 32, w4a16_int4.h) weights on the host, at load, into the layout the
// W4A16 tensor-core kernels read (w4a16_layout.h), and the exact inverse the
// tests use to prove it loses nothing. Pure C++: built with or without CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "format/weight_view.h"

namespace nibble {

struct W4A16Matrix {
  Format format = Format::mxfp4;  // mxfp4, nvfp4 or int4
  int64_t rows = 0, cols = 0;     // logical [rows = out, cols = in]
  int64_t rows_padded = 0;        // multiple of 16
  int64_t cols_padded = 0;        // multiple of 64
  int group = 32;                 // elements per scale: 32 (MXFP4, INT4) or 16 (NVFP4)
  float global_scale = 1.0f;      // NVFP4 s_g; 1 for MXFP4
  std::vector<uint32_t> words;    // [rows_padded/16][cols_padded/64][32][4]
  std::vector<uint8_t> scales;    // [rows_padded/16][cols_padded/64][8][2][64/group] codes (INT4: BF16, 2 bytes each)

  int64_t chunks() const { return cols_padded / 64; }
  int groups_per_chunk() const { return 64 / group; }
  // Device bytes of this matrix in the repacked layout (what `explain` adds up).
  uint64_t bytes() const { return words.size() * 4 + scales.size(); }
};

// Throws nibble::Error naming w.name when w is not MXFP4 / NVFP4 / INT4 with
// group 32, or its columns are not a multiple of the format's block.
W4A16Matrix repack_w4a16(const WeightView& w);

// The stored bytes back: packed [rows, cols/2] E2M1 (element 2j in the low
// nibble of byte j, as in WeightView) and scales [rows, cols/group]
// (INT4: BF16, 2 little-endian bytes each).
void unpack_w4a16(const W4A16Matrix& m, std::vector<uint8_t>& packed, std::vector<uint8_t>& scales);

// Bytes the repacked layout of a [rows, cols] matrix takes (padding included).
uint64_t w4a16_repacked_bytes(Format format, int64_t rows, int64_t cols);
// The scales' share of it.
uint64_t w4a16_scale_bytes(Format format, int64_t rows, int64_t cols);

}  // namespace nibble
