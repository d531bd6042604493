// The W4A16 grouped expert GEMM on tensor cores: for every routed expert e
// and each token assigned to it, y[a] = W_e · x[row(a)], with W_e MXFP4,
// NVFP4 or INT4 (group 32, w4a16_int4.h) in the repacked layout
// (w4a16_layout.h), x BF16, f32 out. This is the
// core of the CUDA MoE: gate / up fused with the clamped SwiGLU
// (moe_w4a16_gate_up_launch), then the down projection, then the routing
// weights and combine (moe_router.h).
//
// Tokens are grouped by expert by the caller: assignments offsets[e] ..
// offsets[e+1]-1 belong to expert e, and x_rows[a] is the row of x that
// assignment a multiplies. A warp owns 16 output rows of one expert and
// walks K once per pass of up to `tokens_per_pass` of its tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "format/format.h"
#include "kernels/cuda/w4a16_repack.h"

namespace nibble {

// One projection (w1, w3 or w2) of every expert, in device memory.
struct W4A16ExpertsDevice {
  Format format = Format::mxfp4;
  int64_t experts = 0;
  int64_t rows = 0, cols = 0;                // per expert
  int64_t rows_padded = 0, cols_padded = 0;  // w4a16_layout.h
  const uint32_t* words = nullptr;           // [experts][rows_padded * cols_padded / 8]
  const uint8_t* scales = nullptr;           // [experts][rows_padded * cols_padded / group] (INT4: x2 bytes, BF16)
  const float* global_scales = nullptr;      // [experts] NVFP4 s_g; null for MXFP4
};

struct MoeGemmArgs {
  const uint16_t* x = nullptr;        // [n_x, cols_padded] BF16 bits, columns past cols zero
  const int32_t* offsets = nullptr;   // [experts + 1] assignment ranges, non-decreasing
  const int32_t* x_rows = nullptr;    // [n_assign] row of x per assignment
  float* y = nullptr;                 // [n_assign, rows], overwritten
  int64_t n_assign = 0;
  int64_t max_per_expert = 0;         // bound on offsets[e+1]-offsets[e]: picks the variant
  int k_splits = 1;                   // K split over this many CTAs per strip (atomic f32 adds)
  void* stream = nullptr;             // cudaStream_t; null = default stream
};

// Tokens one pass of a warp multiplies with each weight fragment it loads
// (8 for the decode variant, 32 for the batched one): the compiled instances.
int moe_w4a16_tokens_per_pass(int64_t max_per_expert);

// The K split for `busy_strips` 16-row strips with tokens (experts with
// tokens x rows_padded / 16) over cols_padded columns on `sms` SMs: 1 when
// the strips alone fill the GPU, else up to 8 (moe_w4a16_plan.cpp says why).
// `nibble bench moe --device cuda` prints it beside the best split it measured.
int moe_w4a16_k_splits(int64_t busy_strips, int64_t cols_padded, int sms);

// Launches on args.stream; no host synchronisation. Throws nibble::Error for
// inconsistent shapes or a launch error (with cudaGetErrorString).
void moe_w4a16_launch(const W4A16ExpertsDevice& w, const MoeGemmArgs& args);

// The gate and up projections of every expert in one launch, fused with
// DeepSeek-V4's clamped SwiGLU: h[a] = silu(min(w1 x, limit)) * clamp(w3 x,
// -limit, limit) (no clamp when limit <= 0), rounded to BF16, the input of
// the down projection (w2's cols_padded wide: ldh). w1 and w3 must agree in
// format and shape. With k_splits > 1 the splits add into the f32 scratch
// g / u, and the last split of each strip applies the SwiGLU.
struct MoeGateUpArgs {
  MoeGemmArgs gemm;               // x, offsets, x_rows, n_assign, max_per_expert, k_splits, stream (y unused)
  uint16_t* h = nullptr;          // [n_assign, ldh] BF16; columns past rows written 0 by the launch
  int64_t ldh = 0;                // >= rows
  float limit = 0;                // swiglu_limit
  float* scratch_g = nullptr;     // [n_assign, rows] f32, when k_splits > 1
  float* scratch_u = nullptr;     // [n_assign, rows] f32, when k_splits > 1
  int32_t* tickets = nullptr;     // [experts * rows_padded/16], zeroed once before the first launch
};
void moe_w4a16_gate_up_launch(const W4A16ExpertsDevice& w1, const W4A16ExpertsDevice& w3, const MoeGateUpArgs& args);

// Host round trip for tests and benchmarks: uploads experts (all of one
// format and shape) and the inputs, runs the kernel `iters` times (after one
// warm-up when iters > 1), downloads y. seconds_per_call is the mean of the
// timed calls (CUDA events).
struct MoeGemmHostResult {
  std::vector<float> y;      // [n_assign, rows]
  double seconds_per_call = 0;
  uint64_t weight_bytes_read = 0;  // repacked bytes of the experts that had tokens
};
MoeGemmHostResult moe_w4a16_run_host(const std::vector<W4A16Matrix>& experts, const std::vector<uint16_t>& x_bf16,
                                     const std::vector<int32_t>& offsets, const std::vector<int32_t>& x_rows,
                                     int k_splits = 1, int iters = 1);

// Host round trip of the fused gate/up: h as f32 (the BF16 values decoded),
// [n_assign, rows].
std::vector<float> moe_w4a16_gate_up_run_host(const std::vector<W4A16Matrix>& w1, const std::vector<W4A16Matrix>& w3,
                                              const std::vector<uint16_t>& x_bf16, const std::vector<int32_t>& offsets,
                                              const std::vector<int32_t>& x_rows, float limit, int k_splits);

}  // namespace nibble
