// The fused MoE layer on CPU SIMD kernels (AVX2, AVX-512): same semantics as
// moe_ref (HF's DeepseekV4SparseMoeBlock), organised for weight streaming:
// tokens are grouped by expert so every selected expert's weights are read
// once per call, and all threads stream disjoint row ranges of the same
// matrices (no oversubscription, no per-op allocation once warm).
#pragma once

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/moe.h"

namespace nibble {

// y may alias x (x is fully read before y is written). FP4 experts run
// exactly (f32 activations); the _int8 variants round x and h to int8
// blocks before FP4 weights (lossy, opt-in; see Fp4Acts in linear_cpu.h).
void moe_avx2(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
              ThreadPool* pool);
void moe_avx512(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                ThreadPool* pool);
void moe_avx2_int8(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                   ThreadPool* pool);
void moe_avx512_int8(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                     ThreadPool* pool);
// FP4 experts against int16 activations (Fp4Acts::int16; AVX2, opt-in).
void moe_avx2_int16(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                    ThreadPool* pool);
// Experts with kAmxMinTokens or more tokens on AMX tiles (Fp4Acts::bf16x3).
void moe_avx512_amx(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                    ThreadPool* pool);

// The layer on the given kernels (what the functions above run with their
// ISA's kernels; `nibble bench --backend read` passes read-only ones).
void moe_with_kernels(const cpu::IsaKernels& k, const MoeWeights& w, const float* x, const int32_t* token_ids,
                      int64_t n, float* y, ThreadPool* pool);

// moe_ref, moe_avx2(_int8, _int16), moe_avx512(_int8) or moe_avx512_amx
// (ref ignores acts; bf16x3 with avx2 and int16 with avx512: null).
MoeFn moe_for_isa(CpuIsa isa, Fp4Acts acts = Fp4Acts::f32);

}  // namespace nibble
