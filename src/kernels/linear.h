// Linear op: Y[n, rows] = X[n, cols] · W[rows, cols]^T, activations f32 in
// and out, W in any stored format. Every implementation (scalar reference,
// AVX2, AVX-512, later CUDA) has this signature and is registered with the
// planner (kernels/registry.h), which picks one per op.
#pragma once

#include <cstdint>

#include "kernels/weights.h"

namespace nibble {

class ThreadPool;

// x: [n, w.cols] row-major; y: [n, w.rows] row-major (overwritten).
// pool may be null (single-threaded).
using LinearFn = void (*)(const WeightView& w, const float* x, int64_t n, float* y,
                          ThreadPool* pool);

// The scalar reference: dequantizes each weight row exactly and accumulates in
// f64. Slow, obviously right; the oracle every other kernel is tested against.
void linear_ref(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

}  // namespace nibble
