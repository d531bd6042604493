// The repacked layouts of the FP8 block-128 and BF16 weights that the
// tensor-core linear kernels read (linear_mma.cuh), and the bit trick that
// turns FP8 E4M3 codes into BF16 mma.sync operands. Host and device share
// this header: the repacker (mma_repack.cpp) writes with these offsets, the
// kernel reads with them, and tests/cuda/mma_layout_test.cpp checks both
// against the PTX fragment table.
//
// As in the W4A16 MoE kernel (w4a16_layout.h, which has the PTX fragment
// map reused here) the weight tile is the A operand of
// mma.sync.m16n8k16.row.col (16 output rows x 16 input columns) and 8
// tokens are B: at decode one token wastes 7/8 of B instead of 15/16 of A.
// A lane's share of one 16x16 tile is 8 elements (a0..a7):
//   FP8:  8 bytes, so a 16-byte lane load covers a chunk of 2 tiles
//         (32 columns); byte (8 j + 2 i + h) of the lane's word is element
//         a(2i+h) of tile j: register i of tile j is two adjacent bytes.
//   BF16: 16 bytes, so a 16-byte lane load is one tile (16 columns); u32 i
//         of the word is register i, as mma.sync takes it.
// Layout of one [rows, cols] matrix (rows padded to 16, cols to the chunk):
//   words:  [strip = rows/16][chunk][lane 32] x 16 bytes; a warp's loads of
//           a chunk are 512 contiguous bytes.
//   FP8 scales: f32 [ceil(rows/128)][ceil(cols/128)], the stored UE8M0 or
//           f32 tile scales widened (exactly) to f32; a strip lies in one
//           row block (16 divides 128), a chunk in one column block.
// Padding holds code 0 (+0.0 in both formats), so it adds exactly 0.
#pragma once

#include <cstdint>

#include "kernels/cuda/w4a16_layout.h"

namespace nibble::mma {

using w4a16::fragment_col;
using w4a16::fragment_row;
using w4a16::round_up;

constexpr int kTileRows = 16;
constexpr int kTileK = 16;
constexpr int kLaneBytes = 16;           // one 16-byte load per lane per chunk
constexpr int kFp8ChunkK = 32;           // FP8: 2 tiles per chunk
constexpr int kBf16ChunkK = 16;          // BF16: 1 tile per chunk
constexpr int kScaleBlock = 128;         // FP8 block-128 tile side

// Columns one lane load covers for `is_fp8` (FP8) or BF16 weights.
NIBBLE_HD int chunk_k(bool is_fp8) { return is_fp8 ? kFp8ChunkK : kBf16ChunkK; }

// Byte offset of (strip, chunk, lane) in `words`: the start of the lane's
// 16 bytes.
NIBBLE_HD int64_t lane_offset(int64_t strip, int64_t chunk, int64_t n_chunks, int lane) {
  return ((strip * n_chunks + chunk) * 32 + lane) * kLaneBytes;
}

// Byte of the lane word that holds FP8 element e (0..7) of tile j (0..1).
NIBBLE_HD int fp8_byte(int j, int e) { return 8 * j + e; }
// u16 (BF16 element) of the lane word that holds element e: register e/2,
// low half for even e.
NIBBLE_HD int bf16_half(int e) { return e; }

// Two E4M3 codes (bytes lo, hi of `pair`: the low byte is the register's
// lower element) -> one BF16x2 register holding each value times 2^-120.
// E4M3 s.eeee.mmm moved to bits 15 and 10..4 of a BF16 puts eeee in the low
// four exponent bits and mmm in the top mantissa bits: the BF16 value
// 2^(E-127)(1+m/8) = E4M3 * 2^-120 for E > 0, and for E = 0 the BF16
// subnormal 2^-126 * m/8 = (m/8 * 2^-6) * 2^-120, the E4M3 subnormal. Both
// exact; one BF16x2 multiply by 2^120 restores the value (kBf16x2Pow120).
// The NaN codes 0x7F / 0xFF become the finite 480 (the repacker refuses
// them, naming the element).
NIBBLE_HD uint32_t dequant_e4m3x2(uint32_t pair) {
  const uint32_t t = ((pair & 0xFFu) << 8) | ((pair & 0xFF00u) << 16);  // bytes -> bits 8..15, 24..31
  return (t & 0x80008000u) | ((t & 0x7F007F00u) >> 4);
}

// The four A registers of FP8 tile j (0 or 1) from a lane's 16-byte word
// held as four u32 (w[0] = bytes 0..3).
NIBBLE_HD void dequant_fp8_tile(const uint32_t w[4], int j, uint32_t a[4]) {
  a[0] = dequant_e4m3x2(w[2 * j] & 0xFFFFu);
  a[1] = dequant_e4m3x2(w[2 * j] >> 16);
  a[2] = dequant_e4m3x2(w[2 * j + 1] & 0xFFFFu);
  a[3] = dequant_e4m3x2(w[2 * j + 1] >> 16);
}

// 2^120 as BF16x2 (exponent 247): multiplies dequant_e4m3x2's output back
// to E4M3 values, exactly (a power of two on 4-significant-bit values, no
// overflow: 448 * 2^-120 * 2^120).
constexpr uint32_t kBf16x2Pow120 = 0x7B807B80u;

}  // namespace nibble::mma
