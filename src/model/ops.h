// Small numeric building blocks shared by the model files: a weight matrix
// bound to the kernel the plan chose for it, row slices of weight views, and
// the f32 elementwise ops (RMSNorm, SiLU, softmax) whose exact order of
// operations follows Hugging Face's fp32 implementation.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/linear.h"
#include "kernels/weights.h"
#include "util/thread_pool.h"

namespace nibble {

// A weight matrix W[out, in] and the linear kernel that multiplies by it.
struct BoundLinear {
  WeightView w;
  LinearFn fn = nullptr;

  int64_t rows() const { return w.rows; }
  int64_t cols() const { return w.cols; }
  // y[n, rows] = x[n, cols] · W^T
  void run(const float* x, int64_t n, float* y, ThreadPool* pool) const { fn(w, x, n, y, pool); }
};

// Rows [r0, r0 + count) of `w` as a view of their own, when the format can
// express it without a copy (FP8 block-128 needs r0 to start a 128-row tile).
std::optional<WeightView> row_slice(const WeightView& w, int64_t r0, int64_t count);

// x[n, dim] -> y = x * rsqrt(mean(x^2) + eps) * weight (weight may be null:
// the unweighted norm). x and y may alias.
void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y);

// sum_i a[i] * b[i] in f32 with eight interleaved partial sums, so the
// compiler can keep them in SIMD lanes (a plain reduction loop stays scalar
// without -ffast-math). Attention scores and indexer scores use it.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// y[i] += alpha * x[i]
inline void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// In place softmax over v[n] (f32 like HF's softmax(dtype=float32)).
void softmax_inplace(float* v, int64_t n);

// fn(begin, end) over [0, n) on the pool (or inline when there is no pool,
// one thread, or too little work for two ranges of `grain`).
template <class Fn>
void pool_for(ThreadPool* pool, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (!pool || pool->size() <= 1 || n < 2 * grain) {
    fn(int64_t(0), n);
    return;
  }
  pool->parallel_for(n, [&](int64_t a, int64_t b, int) { fn(a, b); }, grain);
}

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace nibble
