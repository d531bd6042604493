// One routed-expert weight matrix converted between FP4 block formats, a few
// rows at a time, with the statistics `nibble convert` reports.
//
// The arithmetic lives in format/ (the lossless MXFP4 -> NVFP4 cast, the
// NVFP4 -> MXFP4 re-quantization, the block quantizers); this file cuts a
// matrix into row ranges, feeds them through, and measures what changed so
// that every lossy block is counted and the largest error is known.
#pragma once

#include <cstdint>
#include <string>

#include "format/format.h"

namespace nibble {

// The largest k_max - k_j for which the MXFP4 -> NVFP4 cast copies a block's
// FP4 bytes unchanged (E4M3 holds 2^-9 .. 2^8 exactly; formats.md).
constexpr int kMxfp4ToNvfp4Window = 17;

enum class ExpertOp {
  mxfp4_to_nvfp4,   // lossless cast inside the E4M3 window, re-quantized outside
  nvfp4_to_mxfp4,   // dequantize each 32-block and re-quantize (lossy in general)
  float_to_nvfp4,   // BF16/F32 -> NVFP4, round to nearest (ModelOpt arithmetic)
  float_to_mxfp4,   // BF16/F32 -> MXFP4, round to nearest (OCP MX v1.0)
};
const char* expert_op_name(ExpertOp op);  // "mxfp4->nvfp4", ...
// Elements per block that the statistics count: 32 for everything that has
// MXFP4 on one side, 16 for float -> NVFP4.
int64_t expert_op_block(ExpertOp op);

// The source matrix, logical shape [rows, cols] (cols unpacked).
struct ExpertSource {
  Format format = Format::mxfp4;  // mxfp4, nvfp4, bf16 or f32
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;    // packed FP4 [rows, cols/2], or BF16/F32 [rows, cols]
  const uint8_t* scales = nullptr;  // UE8M0 [rows, cols/32] or E4M3 [rows, cols/16]
  float global_scale = 0;           // NVFP4 source: its weight_scale_2
};

// What the target needs beyond the source.
struct ExpertTargetParams {
  int k_max = 0;          // mxfp4 -> nvfp4: the largest block exponent of the tensor or w1/w3 pair
  float global_scale = 0; // float -> nvfp4: s_g (weight_scale_2)
  // nvfp4 -> mxfp4: a block whose two halves have one E4M3 scale with
  // s_b * s_g a power of two 2^k (every block the lossless cast wrote) goes
  // back to the MX block the cast came from: its FP4 bytes copied, scale k.
  // Same values as re-quantizing (both exact), but the source's bytes even
  // where its quantizer chose another scale than OCP's floor(log2 amax) - 2.
  bool restore_cast_blocks = false;
};

struct ExpertStats {
  int64_t blocks = 0;       // blocks processed (of expert_op_block elements)
  int64_t exact = 0;        // blocks whose every dequantized value equals the source value
  int64_t requantized = 0;  // blocks that went through a quantizer (not a bit copy of the codes)
  double max_abs_error = 0; // largest |target - source| over all elements

  void merge(const ExpertStats& o);
};

// Bytes per output row of the target format.
int64_t target_packed_row_bytes(ExpertOp op, int64_t cols);  // cols / 2
int64_t target_scale_row_bytes(ExpertOp op, int64_t cols);   // cols / 16 or cols / 32

// Converts rows [r0, r1). out_packed / out_scales point at row r0 of the
// target tensors. Safe to call concurrently on disjoint row ranges. Errors
// (NaN scales, NaN or infinite floats) name `tensor` and the element.
ExpertStats convert_expert_rows(const ExpertSource& src, ExpertOp op, const ExpertTargetParams& params,
                                int64_t r0, int64_t r1, uint8_t* out_packed, uint8_t* out_scales,
                                const std::string& tensor);

// Largest block exponent (e - 127) of an MXFP4 matrix's scales.
int mxfp4_matrix_max_exponent(const ExpertSource& src, const std::string& tensor);

// Smallest and largest block exponent (e - 127) of an MXFP4 matrix's scales,
// in one vectorized pass (the plan scans every scale of the model before
// writing anything). The NaN code 0xFF is an error naming `tensor`.
struct ExponentRange {
  int min = 0, max = 0;
};
ExponentRange mxfp4_matrix_exponent_range(const ExpertSource& src, const std::string& tensor);

// The MXFP4 -> NVFP4 cast of a matrix whose blocks all lie inside the
// window (k_max - k_j <= kMxfp4ToNvfp4Window): its FP4 bytes are the
// source's, so only the block scales of rows [r0, r1) are computed, into
// out_scales ([r1 - r0, cols / 16], E4M3). Each source scale code maps to
// one output pair through a table that the format's own cast fills, one
// block per possible code. A block outside the window, above k_max or with
// the NaN code is an error naming `tensor`, the row and the block (the plan
// promised none). Returns the statistics of the full cast (all exact).
ExpertStats cast_scales_in_window(const ExpertSource& src, int k_max, int64_t r0, int64_t r1, uint8_t* out_scales,
                                  const std::string& tensor);
// Largest |x| of a BF16/F32 matrix; NaN or infinity is an error naming the tensor.
float float_matrix_amax(const ExpertSource& src, const std::string& tensor);

}  // namespace nibble
