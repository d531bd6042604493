// The repacked FP4 weight layout of the W4A16 tensor-core kernels
// (moe_w4a16.cuh), and the bit tricks that turn it into mma.sync operands.
// Host and device share this header: the repacker (w4a16_repack.cpp) writes
// with these offsets, the kernel reads with them, and the CPU tests check
// both against the PTX fragment layout (tests/cuda/w4a16_layout_test.cpp).
//
// The kernel computes Y^T = W · X^T with mma.sync.m16n8k16.row.col BF16:
// A (16x16, row) is a weight tile — 16 output rows by 16 input columns —
// and B (16x8, col) is 8 tokens' activations, so a decode step with one
// token per expert wastes 7/8 of B, not 15/16 of A. PTX ISA fragment layout
// (lane L, g = L / 4, t = L % 4; each 32-bit register holds two BF16, the
// lower index in the low half):
//   A reg 0: row g,   cols 2t, 2t+1      A reg 1: row g+8, cols 2t, 2t+1
//   A reg 2: row g,   cols 2t+8, 2t+9    A reg 3: row g+8, cols 2t+8, 2t+9
//   B reg 0: k 2t, 2t+1, token g         B reg 1: k 2t+8, 2t+9, token g
//   C c0,c1: row g, tokens 2t, 2t+1      C c2,c3: row g+8, tokens 2t, 2t+1
// So one lane's share of a 16x16 FP4 tile is 8 nibbles: one 32-bit word.
//
// Layout of one [rows, cols] matrix (rows padded to 16, cols to 64):
//   words:  [strip = rows/16][chunk = cols/64][lane 32][k-tile 4] u32
//           — a lane loads its four k-tiles of a chunk as one 16-byte load,
//           and a warp's loads of a chunk are 512 contiguous bytes.
//   scales: [strip][chunk][g 8][half 2][group-in-chunk] bytes (UE8M0 or
//           E4M3 codes as stored) — lane g reads the scales of its two rows
//           (g, g+8) for the whole chunk as one 4-byte (MXFP4, 2 groups of
//           32) or 8-byte (NVFP4, 4 groups of 16) load.
// Padding: rows past `rows` and columns past `cols` hold code 0 (+0.0) and
// the neutral scale (UE8M0 127 = 1.0, E4M3 0x38 = 1.0), so they add exactly 0.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NIBBLE_HD __host__ __device__ __forceinline__
#else
#define NIBBLE_HD inline
#endif

namespace nibble::w4a16 {

constexpr int kTileRows = 16;    // A tile rows (output features per strip)
constexpr int kTileK = 16;       // A tile columns (one mma's K)
constexpr int kChunkK = 64;      // columns per 16-byte lane load (4 k-tiles)
constexpr int kTilesPerChunk = kChunkK / kTileK;
constexpr int kTokensPerMma = 8;  // B columns

NIBBLE_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// u32 index of (strip, chunk, lane, k-tile j) in `words`.
NIBBLE_HD int64_t word_index(int64_t strip, int64_t chunk, int64_t n_chunks, int lane, int j) {
  return ((strip * n_chunks + chunk) * 32 + lane) * kTilesPerChunk + j;
}

// Byte index of (strip, chunk, g, half, group-in-chunk gi) in `scales`, for
// `gpc` groups per chunk (2 for MXFP4, 4 for NVFP4).
NIBBLE_HD int64_t scale_index(int64_t strip, int64_t chunk, int64_t n_chunks, int g, int half, int gi, int gpc) {
  return (((strip * n_chunks + chunk) * 8 + g) * 2 + half) * gpc + gi;
}

// Element e (0..7) of a lane's A fragment for one 16x16 tile: its row and
// column inside the tile (PTX layout above; a0..a7 in register order).
NIBBLE_HD int fragment_row(int lane, int e) { return (lane >> 2) + ((e >> 1) & 1) * 8; }
NIBBLE_HD int fragment_col(int lane, int e) { return (lane & 3) * 2 + (e & 1) + (e >> 2) * 8; }

// Nibble position (0 = bits 0..3, ..., 7 = bits 28..31) of fragment element
// e in the lane's word. dequant_fp4x8 below reads register i (elements 2i,
// 2i+1) from nibbles 3-i (low half) and 7-i (high half); see there.
NIBBLE_HD int nibble_position(int e) { return (e & 1) ? 7 - (e >> 1) : 3 - (e >> 1); }

// Eight E2M1 codes -> four BF16x2 A registers, each value times 2^-126
// (Marlin's trick, gpu.md §1.3): E2M1 s.e1e0.m moved to bits 15 and 8..6
// of a BF16 lands e1e0 in the two low exponent bits and m in the top
// mantissa bit, i.e. the BF16 (sub)normal 2^(E-127)(1+m/2) or 2^-126 m/2
// — exactly E2M1 * 2^-126, the E2M1 subnormal 0.5 included. The shift by 4
// between registers walks nibble 3-i / 7-i into bits 12..15 / 28..31.
NIBBLE_HD void dequant_fp4x8(uint32_t q, uint32_t out[4]) {
  for (int i = 0; i < 4; ++i) {
    out[i] = (q & 0x80008000u) | ((q & 0x70007000u) >> 6);
    q <<= 4;
  }
}

// 2^126 as BF16x2: multiplies dequant_fp4x8's output back to E2M1 values
// (exact: a power of two on values of two significant bits).
constexpr uint32_t kBf16x2Pow126 = 0x7E807E80u;

NIBBLE_HD float bits_to_f32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// Scale codes -> f32, as format/element.h decodes them.
NIBBLE_HD float ue8m0_to_f32(uint32_t e) {
  // 2^(e-127): the code is the f32 exponent field; e = 0 is the f32
  // subnormal 2^-127 (bit 22), 0xFF the NaN it is.
  return bits_to_f32(e == 0 ? 0x00400000u : (e == 0xFF ? 0x7FC00000u : e << 23));
}
NIBBLE_HD float e4m3_to_f32(uint32_t c) {
  const uint32_t e = (c >> 3) & 0xF, m = c & 7;
  const float sign = (c & 0x80u) ? -1.0f : 1.0f;
  if ((c & 0x7F) == 0x7F) return bits_to_f32(0x7FC00000u);  // NaN
  if (e == 0) return sign * float(m) * (1.0f / 512.0f);        // subnormal m/8 * 2^-6, exact
  return sign * bits_to_f32(((e + 120) << 23) | (m << 20));    // bias 7 -> 127
}

}  // namespace nibble::w4a16
