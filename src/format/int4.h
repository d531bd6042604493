// Symmetric group-wise INT4 as compressed-tensors' `pack-quantized` format
// stores it (Kimi K2's routed experts): value = q * scale, q a signed 4-bit
// integer in [-8, 7], one BF16 scale per `group` consecutive elements of a
// row (group_size 32 in Kimi K2).
//
// Storage, as compressed_tensors.compressors.pack_quantized.helpers.
// pack_to_int32 writes it: `weight_packed` I32 [rows, ceil(cols / 8)], element
// k of a row at bits 4k .. 4k+3 of the row's little-endian bit stream, as the
// unsigned code q + 8. Read as bytes on a little-endian host that is element
// 2j in the LOW nibble of byte j, as for the FP4 formats (block.h), so the
// kernels read the words' bytes as they are. `weight_scale` BF16
// [rows, cols / group]; `weight_shape` [2] the logical [rows, cols].
//
// The product q * scale is exact in f32 (4 + 8 significant bits), which is
// what nibble computes with; compressed-tensors' own decompress rounds it to
// the scale's dtype (BF16), so a BF16 reference differs from this one by up
// to half a BF16 ulp of each weight.
#pragma once

#include <cstdint>

namespace nibble {

// n a multiple of `group`, group a multiple of 8. packed: n/2 bytes;
// scales: n/group BF16 values.
void int4_dequantize_row(const uint8_t* packed, const uint16_t* scales, int64_t n, int64_t group, float* y);

// A reference quantizer for random test weights: per group s = BF16(amax /
// 7), so the largest magnitude maps to about +-7, q = clamp(RNE(x / s), -8,
// 7); an all-zero group gets s = 1 and zero codes. Inputs must be finite.
// (Readers accept any scale; this choice is nibble's, not a publisher's.)
void int4_quantize_row(const float* x, int64_t n, int64_t group, uint8_t* packed, uint16_t* scales);

}  // namespace nibble
