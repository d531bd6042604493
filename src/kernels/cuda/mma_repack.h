// Repacking FP8 block-128 and BF16 weights on the host, at load, into the
// layout the tensor-core linear kernels read (mma_layout.h), and the exact
// inverse the tests use to prove it loses nothing. Pure C++: built with or
// without CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "format/weight_view.h"

namespace nibble {

struct MmaMatrix {
  Format format = Format::bf16;   // fp8_block128 or bf16
  int64_t rows = 0, cols = 0;     // logical [rows = out, cols = in]
  int64_t rows_padded = 0;        // multiple of 16
  int64_t cols_padded = 0;        // multiple of the chunk (32 FP8, 16 BF16)
  int64_t row_blocks = 0, col_blocks = 0;  // FP8: ceil(rows/128), ceil(cols/128); else 0
  std::vector<uint8_t> words;     // [rows_padded/16][chunks][32 lanes][16 bytes]
  std::vector<float> scales;      // FP8: [row_blocks][col_blocks]; BF16: empty

  int64_t chunks() const;
  // Device bytes of this matrix in the repacked layout (what explain and the
  // weight store add up).
  uint64_t bytes() const { return words.size() + scales.size() * 4; }
};

// Throws nibble::Error naming w.name when w is neither FP8 block-128 nor
// BF16, or when an FP8 code is an E4M3 NaN (0x7F / 0xFF: the kernel's
// shift would read it as 480) or a tile scale is not a positive finite
// number (naming the element).
MmaMatrix repack_mma(const WeightView& w);

// Repacks only strips [strip0, strip1) into `out` (strip1 - strip0 strips of
// words, laid out as in MmaMatrix::words from strip0): the weight store
// streams large matrices (the BF16 head) through its staging buffers this
// way. Scales are not written (mma_scales gives them).
void repack_mma_strips(const WeightView& w, int64_t strip0, int64_t strip1, uint8_t* out);
std::vector<float> mma_scales(const WeightView& w);

// The stored bytes back: [rows, cols] E4M3 codes or BF16 (2 bytes each, little
// endian), row-major, and the scales as f32.
void unpack_mma(const MmaMatrix& m, std::vector<uint8_t>& data);

// Bytes of the repacked words of a [rows, cols] matrix (padding included),
// and of the f32 scales (FP8 only).
uint64_t mma_word_bytes(Format format, int64_t rows, int64_t cols);
uint64_t mma_scale_bytes(Format format, int64_t rows, int64_t cols);

}  // namespace nibble
