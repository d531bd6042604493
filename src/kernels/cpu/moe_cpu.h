// The fused MoE layer on CPU SIMD kernels (AVX2, AVX-512): same semantics as
// moe_ref (HF's DeepseekV4SparseMoeBlock), organised for weight streaming:
// tokens are grouped by expert so every selected expert's weights are read
// once per call, and all threads stream disjoint row ranges of the same
// matrices (no oversubscription, no per-op allocation once warm).
#pragma once

#include "kernels/cpu/cpu_isa.h"
#include "kernels/moe.h"

namespace nibble {

// y may alias x (x is fully read before y is written).
void moe_avx2(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
              ThreadPool* pool);
void moe_avx512(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                ThreadPool* pool);

// moe_ref, moe_avx2 or moe_avx512.
MoeFn moe_for_isa(CpuIsa isa);

}  // namespace nibble
