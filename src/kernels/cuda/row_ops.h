// The row-wise ops of the DeepSeek-V4 forward on the GPU (model/backend.h's
// embed, rms_norm, gather_rows, add_to_streams, add_bias, and the F32 linear
// the hyper-connection mixes use), one small kernel each: correctness first,
// in the CPU backend's order of operations where it matters (RMSNorm's
// reciprocal root, then x * r, then * weight). Every pointer is device
// memory; the launches are asynchronous on `stream` (null: the default
// stream) and never synchronise, so a decode step can be captured as a graph.
// The *_host round trips exist for the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "format/weight_view.h"

namespace nibble {

// y[n, dim] = x * rsqrt(mean(x^2) + eps) * weight (weight may be null); x and y may alias.
void cuda_rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* y,
                   void* stream = nullptr);

// streams[n, copies * cols] += x[n, cols] broadcast over the copies.
void cuda_add_to_streams(const float* x, int64_t n, int64_t cols, int64_t copies, float* streams,
                         void* stream = nullptr);

// out[r, cols] = x[rows[r], cols] for r < n_rows (rows: device int64).
void cuda_gather_rows(const float* x, int64_t cols, const int64_t* rows, int64_t n_rows, float* out,
                      void* stream = nullptr);

// dst[r, dst_c0 + c] = src[r, src_c0 + c] for r < n, c < cols (row strides
// src_ld, dst_ld): a column block moved between row-major matrices (the
// grouped output projection's per-group inputs and outputs).
void cuda_copy_cols(const float* src, int64_t src_ld, int64_t src_c0, float* dst, int64_t dst_ld, int64_t dst_c0,
                    int64_t n, int64_t cols, void* stream = nullptr);

// y[n, cols] += bias[cols] on every row.
void cuda_add_bias(float* y, int64_t n, int64_t cols, const float* bias, void* stream = nullptr);

// out[t, copies * dim] = row ids[t] of table [vocab, dim] (F32 or BF16, the
// stored bytes), repeated `copies` times. An id outside [0, vocab) writes
// zeros and sets *error to 1 + t of the first such token seen (error:
// device int32, zeroed by the caller; read when it synchronises).
void cuda_embed(const void* table, Format format, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n,
                int64_t copies, float* out, int32_t* error, void* stream = nullptr);

// y[n, rows] = x[n, cols] · W^T with W F32 [rows, cols]: one warp per output,
// f32 partial sums per lane then a shuffle tree. The hyper-connection mixes
// (hc_*_fn, 24 x 16384 on Flash) are the only F32 matrices of the forward.
void cuda_linear_f32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                     void* stream = nullptr);

// ---- host round trips (tests) ----
std::vector<float> cuda_rms_norm_host(const std::vector<float>& x, int64_t n, int64_t dim,
                                      const std::vector<float>& weight, float eps);
std::vector<float> cuda_add_to_streams_host(const std::vector<float>& x, int64_t n, int64_t cols, int64_t copies,
                                            std::vector<float> streams);
std::vector<float> cuda_gather_rows_host(const std::vector<float>& x, int64_t cols, const std::vector<int64_t>& rows);
// dst after the copy (dst [n, dst_ld] given, src [n, src_ld]).
std::vector<float> cuda_copy_cols_host(const std::vector<float>& src, int64_t src_ld, int64_t src_c0,
                                       std::vector<float> dst, int64_t dst_ld, int64_t dst_c0, int64_t n, int64_t cols);
std::vector<float> cuda_add_bias_host(std::vector<float> y, int64_t n, int64_t cols, const std::vector<float>& bias);
// Throws nibble::Error naming the first bad token's id.
std::vector<float> cuda_embed_host(const WeightView& table, const std::vector<int32_t>& ids, int64_t copies);
std::vector<float> cuda_linear_f32_host(const std::vector<float>& w, int64_t rows, int64_t cols,
                                        const std::vector<float>& x, int64_t n);

}  // namespace nibble
