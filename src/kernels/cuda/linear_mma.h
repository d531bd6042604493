// The tensor-core linear kernels: y[n, rows] = x[n, cols] · W^T for FP8
// block-128 weights (W8A16: E4M3 codes dequantized to BF16 in registers,
// the f32 tile scale applied to each chunk's partial) and BF16 weights, both
// on mma.sync m16n8k16 BF16 with f32 accumulation, weights in the repacked
// layout of mma_layout.h. x is BF16 (the caller rounds activations once:
// to_bf16_padded), y f32.
//
// A warp owns one 16-row strip and a K range (all of it, or 1/k_splits with
// f32 atomic adds), and walks K once per pass of 8 (decode) or 32 tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "format/format.h"
#include "kernels/cuda/mma_repack.h"

namespace nibble {

// One matrix in device memory, in the repacked layout.
struct MmaWeightsDevice {
  Format format = Format::bf16;          // fp8_block128 or bf16
  int64_t rows = 0, cols = 0;
  int64_t rows_padded = 0, cols_padded = 0;
  int64_t col_blocks = 0;                // FP8: ceil(cols/128)
  const uint8_t* words = nullptr;        // mma_layout.h, 16-byte aligned
  const float* scales = nullptr;         // FP8: [ceil(rows/128)][col_blocks]; BF16: null
};

// The device view of a host-repacked matrix's shape (pointers left null).
MmaWeightsDevice mma_device_shape(const MmaMatrix& m);

// The K split for a [rows_padded, cols_padded] matrix on `sms` SMs: enough
// warps in flight to cover HBM latency (moe_w4a16_k_splits' reasoning),
// each split keeping at least 8 chunks (linear_mma_plan.cpp).
int linear_mma_k_splits(int64_t rows_padded, int64_t chunks, int sms);

// Launches on `stream` (cudaStream_t, null = default); no host sync.
// x: [n, w.cols_padded] BF16 bits, columns past cols zero. y: [n, w.rows].
// Throws nibble::Error for a bad shape or a launch error.
void linear_mma_launch(const MmaWeightsDevice& w, const uint16_t* x, int64_t n, float* y, int k_splits,
                       void* stream = nullptr);

// f32 [n, cols] -> BF16 [n, ld] (round to nearest even, columns cols..ld-1
// zero), on `stream`.
void to_bf16_padded(const float* x, int64_t n, int64_t cols, int64_t ld, uint16_t* out, void* stream = nullptr);

// Host round trip for tests and benchmarks: uploads m and x (f32, rounded to
// BF16 on the GPU), runs `iters` times (one warm-up first when iters > 1),
// downloads y [n, rows]. k_splits 0: linear_mma_k_splits' choice.
struct LinearMmaHostResult {
  std::vector<float> y;
  double seconds_per_call = 0;  // mean over the timed calls (CUDA events), conversion excluded
  int k_splits = 1;
};
LinearMmaHostResult linear_mma_run_host(const MmaMatrix& m, const std::vector<float>& x, int64_t n, int k_splits = 0,
                                        int iters = 1);

}  // namespace nibble
