// The W4A16 grouped expert GEMM kernel (moe_w4a16.h says what it computes;
// w4a16_layout.h the weight layout and the fragment map). Instantiated per
// weight format in moe_w4a16_{mxfp4,nvfp4}.cu, each with the two token
// widths the launcher can choose (moe_w4a16_tokens_per_pass).
//
// Per warp: 16 output rows (one strip) of one expert, a K range (all of it,
// or 1/k_splits), and up to 8 * kPasses of that expert's tokens per pass.
// Per 64-column chunk a lane makes one 16-byte streaming load of weights
// (its four 16x16 tiles' fragments) and one 4- or 8-byte load of the scales
// of its two rows; per 16x16 tile it dequantizes in registers (3 integer ops
// and one BF16x2 multiply per 2 weights), runs one mma.sync per 8 tokens into
// a per-group partial, and folds the partial into the f32 accumulator with
// the group's f32 scale (MXFP4: 2 tiles per group, NVFP4: 1). Scaling after
// the MMA keeps every BF16 operand exact: E2M1 values are exact in BF16, and
// the f32 scale product matches the reference's dequantize-then-multiply
// up to f32 rounding (the NVFP4 scale is E4M3(s_b) * s_g in f32, ModelOpt's
// order, as format/block.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/w4a16_layout.h"

namespace nibble::w4a16 {

constexpr int kWarpsPerBlock = 4;

struct KernelParams {
  const uint4* words = nullptr;         // all experts, words_per_expert u32 each
  const uint8_t* scales = nullptr;      // all experts, scales_per_expert bytes each
  const float* global_scales = nullptr; // [experts] (NVFP4) or null (1.0)
  int64_t words_per_expert = 0;
  int64_t scales_per_expert = 0;
  const uint16_t* x = nullptr;          // [n_x, ldx] BF16
  int64_t ldx = 0;                      // = cols_padded
  const int32_t* offsets = nullptr;     // [experts + 1]
  const int32_t* x_rows = nullptr;      // [n_assign]
  float* y = nullptr;                   // [n_assign, rows]
  int rows = 0, strips = 0, n_chunks = 0, experts = 0, k_splits = 1;
};

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

template <int kGroup>
__device__ __forceinline__ float group_scale(uint32_t code, float global_scale) {
  if constexpr (kGroup == 32) return ue8m0_to_f32(code);
  else return e4m3_to_f32(code) * global_scale;
}

template <int kGroup, int kPasses>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_w4a16_kernel(const KernelParams p) {
  constexpr int kGpc = kChunkK / kGroup;               // groups per chunk: 2 or 4
  constexpr int kTilesPerGroup = kGroup / kTileK;      // 2 or 1
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int e = int(item / p.strips), strip = int(item % p.strips);
  if (e >= p.experts) return;
  const int begin = p.offsets[e], count = p.offsets[e + 1] - begin;
  if (count <= 0) return;  // most warps at decode: 6 of 256 experts have tokens
  const int c0 = int(int64_t(p.n_chunks) * blockIdx.y / p.k_splits);
  const int c1 = int(int64_t(p.n_chunks) * (blockIdx.y + 1) / p.k_splits);
  const int g = lane >> 2, t = lane & 3;
  const float gs = p.global_scales ? p.global_scales[e] : 1.0f;
  // word_index(strip, ch, n_chunks, lane, 0) / 4, in uint4, at ch = 0.
  const uint4* wp = p.words + e * (p.words_per_expert / 4) + int64_t(strip) * p.n_chunks * 32 + lane;
  // scale_index(strip, ch, n_chunks, g, 0, 0, kGpc) at ch = 0.
  const uint8_t* sp = p.scales + e * p.scales_per_expert + int64_t(strip) * p.n_chunks * 16 * kGpc + g * 2 * kGpc;

  for (int tb = 0; tb < count; tb += kTokensPerMma * kPasses) {
    // B fragment: this lane supplies token g of each 8-token block, columns
    // 2t, 2t+1 and 2t+8, 2t+9 of every k-tile. Missing tokens multiply 0.
    const uint16_t* xr[kPasses];
#pragma unroll
    for (int nb = 0; nb < kPasses; ++nb) {
      const int j = tb + nb * kTokensPerMma + g;
      xr[nb] = j < count ? p.x + int64_t(p.x_rows[begin + j]) * p.ldx + 2 * t : nullptr;
    }
    float acc[kPasses][4] = {};
    for (int ch = c0; ch < c1; ++ch) {
      const uint4 wq = __ldcs(wp + int64_t(ch) * 32);  // read once: evict first
      uint32_t sc[kGpc / 2];                            // bytes [half][gi]
      const uint8_t* s = sp + int64_t(ch) * 16 * kGpc;
      if constexpr (kGpc == 2) {
        sc[0] = __ldg(reinterpret_cast<const unsigned int*>(s));
      } else {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(s));
        sc[0] = v.x;
        sc[1] = v.y;
      }
      const uint32_t q[4] = {wq.x, wq.y, wq.z, wq.w};
      float part[kPasses][4] = {};
#pragma unroll
      for (int j = 0; j < kTilesPerChunk; ++j) {
        uint32_t a[4];
        dequant_fp4x8(q[j], a);
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = bf16x2_mul(a[i], kBf16x2Pow126);
        const int k0 = (ch * kTilesPerChunk + j) * kTileK;
#pragma unroll
        for (int nb = 0; nb < kPasses; ++nb) {
          uint32_t b0 = 0, b1 = 0;
          if (xr[nb]) {
            b0 = __ldg(reinterpret_cast<const unsigned int*>(xr[nb] + k0));
            b1 = __ldg(reinterpret_cast<const unsigned int*>(xr[nb] + k0 + 8));
          }
          mma_bf16_m16n8k16(part[nb], a, b0, b1);
        }
        if ((j + 1) % kTilesPerGroup == 0) {
          const int gi = j / kTilesPerGroup;
          const int b_lo = gi, b_hi = kGpc + gi;  // byte of row g, of row g+8
          const float s0 = group_scale<kGroup>((sc[b_lo / 4] >> (8 * (b_lo % 4))) & 0xFF, gs);
          const float s1 = group_scale<kGroup>((sc[b_hi / 4] >> (8 * (b_hi % 4))) & 0xFF, gs);
#pragma unroll
          for (int nb = 0; nb < kPasses; ++nb) {
            acc[nb][0] += part[nb][0] * s0;
            acc[nb][1] += part[nb][1] * s0;
            acc[nb][2] += part[nb][2] * s1;
            acc[nb][3] += part[nb][3] * s1;
            part[nb][0] = part[nb][1] = part[nb][2] = part[nb][3] = 0.0f;
          }
        }
      }
    }
    // C fragment: rows g, g+8 of the strip; tokens 2t, 2t+1 of each block.
#pragma unroll
    for (int nb = 0; nb < kPasses; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = strip * kTileRows + g + 8 * h;
        if (row >= p.rows) continue;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int j = tb + nb * kTokensPerMma + 2 * t + b;
          if (j >= count) continue;
          float* out = p.y + int64_t(begin + j) * p.rows + row;
          if (p.k_splits > 1) atomicAdd(out, acc[nb][2 * h + b]);
          else *out = acc[nb][2 * h + b];
        }
      }
  }
}

// Defined in moe_w4a16_mxfp4.cu / moe_w4a16_nvfp4.cu: launch the instance for
// `passes` (1 or 4) token blocks of 8.
void launch_mxfp4(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream);
void launch_nvfp4(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream);

}  // namespace nibble::w4a16
