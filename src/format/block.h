// Block formats of formats.md: MXFP4, NVFP4 and DeepSeek's FP8 block-128,
// row by row. FP4 codes are packed two per byte, element 2j in the LOW
// nibble of byte j. These scalar routines are the reference the SIMD kernels
// are tested against and what `nibble convert` uses.
//
// Errors (nibble::Error, message naming the element / block at fault): NaN or
// infinite inputs to a quantizer, a NaN scale code (UE8M0 0xFF, E4M3
// 0x7F/0xFF) given to a dequantizer or cast, lengths that are not a multiple
// of the block. Callers add the tensor name.
#pragma once

#include <cstdint>

namespace nibble {

constexpr int64_t kMxfp4Block = 32;  // elements per UE8M0 scale
constexpr int64_t kNvfp4Block = 16;  // elements per E4M3 scale
constexpr int64_t kFp8Tile = 128;    // FP8 block-128: one scale per 128x128 tile

// ---- MXFP4: value = E2M1 * 2^(e-127) ----------------------------------------
// n must be a multiple of 32. packed: n/2 bytes; scales: n/32 UE8M0 codes.
// Quantization (OCP MX v1.0): e - 127 = floor(log2(amax_block)) - 2, clamped
// to [-127, 127]; codes RNE(x / 2^(e-127)) saturated to +-6. An all-zero
// block gets the neutral scale 2^0 (code 127) and zero codes (sign kept:
// -0 encodes as 0x8), mirroring ModelOpt's "zero scale -> 1.0" for NVFP4.
void mxfp4_quantize_row(const float* x, int64_t n, uint8_t* packed, uint8_t* scales);
void mxfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n, float* y);

// ---- NVFP4: value = E2M1 * E4M3(s_b) * s_g ------------------------------------
// The tensor-wide scale s_g (ModelOpt's weight_scale_2) = amax / (6 * 448),
// one f32 division. amax must be finite and >= 0.
float nvfp4_global_scale(float amax);
// n must be a multiple of 16. packed: n/2 bytes; scales: n/16 E4M3 codes.
// ModelOpt's f32 arithmetic, in its order: s_b = E4M3(amax_b / (6 * s_g))
// (a zero quotient becomes 1.0 first, so an all-zero block gets scale 0x38),
// codes = RNE(x / (E4M3(s_b) * s_g)) saturated to +-6; a block whose s_b
// rounds to E4M3 zero gets zero codes. global_scale must be finite and >= 0,
// and large enough that E4M3(s_b) * s_g is not 0 for a non-zero block.
void nvfp4_quantize_row(const float* x, int64_t n, float global_scale, uint8_t* packed,
                        uint8_t* scales);
// y = code * (E4M3(s_b) * s_g), the f32 product first, as ModelOpt's
// dequantize does.
void nvfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int64_t n,
                          float global_scale, float* y);

// ---- FP8 block-128: value = E4M3 * scale[row/128][col/128] --------------------
enum class Fp8ScaleType {
  ue8m0,  // DeepSeek-V4 `.scale`, F8_E8M0 powers of two
  f32,    // DeepSeek-V3 / Kimi `.weight_scale_inv`
};
// w: [rows, cols] E4M3 codes; scales: [ceil(rows/128), ceil(cols/128)].
void fp8_block_dequantize(const uint8_t* w, int64_t rows, int64_t cols, const void* scales,
                          Fp8ScaleType scale_type, float* y);
// Per tile: s = amax_tile / 448 (f32). f32 scales store s; UE8M0 scales store
// the smallest power of two >= s (ceil of log2, DeepSeek's scale_fmt
// "ue8m0"), exponent clamped to [-127, 127]. Codes = E4M3(x / scale),
// saturating at +-448. An all-zero tile gets scale 1.0 and zero codes.
void fp8_block_quantize(const float* x, int64_t rows, int64_t cols, Fp8ScaleType scale_type,
                        uint8_t* w, void* scales);

// ---- MXFP4 <-> NVFP4 ------------------------------------------------------------
// With k_max the largest block exponent (e - 127) over a tensor or a w1/w3
// pair, s_g = 2^(k_max - 8) and each 16-half of MX block j gets
// s_b = 2^(k_j - k_max + 8); whenever k_max - k_j <= 17 the FP4 codes are
// copied byte for byte and every value is identical. Other blocks are
// re-quantized from their exact values and counted.
struct CastStats {
  int64_t blocks = 0;       // MX blocks seen
  int64_t exact = 0;        // copied bit-exactly
  int64_t requantized = 0;  // outside the window, re-quantized (lossy)
  double max_abs_error = 0; // largest |nv - mx| over all elements
};
// Largest e - 127 over count UE8M0 codes (count >= 1; 0xFF is an error).
int mxfp4_max_exponent(const uint8_t* scales, int64_t count);
float mxfp4_to_nvfp4_global_scale(int k_max);  // 2^(k_max - 8); k_max in [-127, 127]
// One [rows, cols] tensor, cols a multiple of 32. mx_packed/nv_packed:
// [rows, cols/2]; mx_scales: [rows, cols/32]; nv_scales: [rows, cols/16].
// k_max must be >= every block exponent of the tensor (it may be larger, for
// a w1/w3 pair sharing one s_g). The outputs must not alias the inputs.
CastStats mxfp4_to_nvfp4(const uint8_t* mx_packed, const uint8_t* mx_scales, int64_t rows,
                         int64_t cols, int k_max, uint8_t* nv_packed, uint8_t* nv_scales);
// The other way, lossy in general: each 32-element block (two NVFP4 halves)
// is dequantized (f32, as nvfp4_dequantize_row) and re-quantized with
// mxfp4_quantize_row. Here `exact` counts blocks whose dequantized values
// survive unchanged and `requantized` the others; max_abs_error as above.
// Same shapes as mxfp4_to_nvfp4; global_scale is the NVFP4 s_g.
CastStats nvfp4_to_mxfp4(const uint8_t* nv_packed, const uint8_t* nv_scales, int64_t rows,
                         int64_t cols, float global_scale, uint8_t* mx_packed,
                         uint8_t* mx_scales);

}  // namespace nibble
