// The two tensor-core instructions every nibble kernel builds on, shared by
// the W4A16 MoE kernel (moe_w4a16.cuh) and the linear kernels
// (linear_mma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::tc {

// D = A·B + D, m16n8k16, BF16 inputs, f32 accumulate (sm_80+: every arch
// nibble builds; the guard keeps a pre-sm_80 PTX pass, were one ever added,
// from emitting an instruction it lacks).
__device__ __forceinline__ void mma_bf16_m16n8k16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// a * b for BF16x2, exact here (one factor a power of two). fma with -0.0 is
// a pure product (+0 stays +0); BF16 subnormals are kept (PTX has no .ftz
// for bf16), which the E2M1 value 0.5 needs after dequant_fp4x8.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
#else
  __trap();
  return 0;
#endif
}

}  // namespace nibble::tc
