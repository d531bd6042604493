// INT4 (compressed-tensors pack-quantized, format/int4.h) in the W4A16
// layout (w4a16_layout.h): the same nibble permutation as FP4, the stored
// codes (q + 8) as they are, and BF16 scales, 2 bytes each in the scale
// layout's [strip][chunk][g][half][group-in-chunk] order (group 32: a lane
// reads the 4 scales of its rows g, g+8 for a chunk as one 8-byte load).
// Padding holds code 8 (q = 0) and the BF16 scale 1.0, so it adds exactly 0.
// Host and device share this header.
//
// Dequantization (Marlin's INT4 trick, gpu.md §1.3): the BF16 with bits
// 0x4300 | c is 128 + c for c in 0..15 (exponent 2^7, c in the low mantissa
// bits), so
//   A register i = ((q >> 4(3-i)) & 0x000F000F) | 0x43004300,  then
//   A register i = fma.rn.bf16x2(A, 1.0, -136.0) = c - 8 = q,
// both exact (every value involved has at most 8 significant bits). Register
// i takes nibble 3-i in its low half and 7-i in its high half, the
// positions dequant_fp4x8 reads (nibble_position), so repacking is shared.
// The group's f32 scale (BF16 bits << 16) multiplies the MMA's f32 partial,
// as for MXFP4.
#pragma once

#include <cstdint>

#include "kernels/cuda/w4a16_layout.h"

namespace nibble::w4a16 {

constexpr uint32_t kInt4ZeroCode = 8;         // q = 0: padding
constexpr uint16_t kInt4PadScale = 0x3F80;    // BF16 1.0: padding
constexpr uint32_t kBf16x2One = 0x3F803F80u;  // 1.0, 1.0
constexpr uint32_t kBf16x2Minus136 = 0xC308C308u;  // -136.0, -136.0: 128 + 8

// Eight INT4 codes -> four BF16x2 registers holding 128 + code (see above;
// the kernel then subtracts 136).
NIBBLE_HD void dequant_int4x8_biased(uint32_t q, uint32_t out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = ((q >> (4 * (3 - i))) & 0x000F000Fu) | 0x43004300u;
}

// A BF16 scale's bits -> f32 (exact).
NIBBLE_HD float bf16_scale_to_f32(uint32_t bits) { return bits_to_f32(bits << 16); }

}  // namespace nibble::w4a16
