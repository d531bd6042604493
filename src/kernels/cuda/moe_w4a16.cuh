// The W4A16 grouped expert GEMM kernel (moe_w4a16.h says what it computes;
// w4a16_layout.h the weight layout and the fragment map). Instantiated per
// weight format in moe_w4a16_{mxfp4,nvfp4}.cu, each with the two token
// widths the launcher can choose (moe_w4a16_tokens_per_pass); INT4 in
// moe_w4a16_int4.cu (kInt4: w4a16_int4.h).
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

#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/w4a16_int4.h"
#include "kernels/cuda/w4a16_layout.h"

namespace nibble::w4a16 {

constexpr int kWarpsPerBlock = 4;
using tc::bf16x2_mul;
using tc::mma_bf16_m16n8k16;

struct KernelParams {
  // [0]: the projection (w1 / w2 / w3); [1]: with the fused gate/up, the up
  // projection w3 (same layout and shape as [0] = w1).
  const uint4* words[2] = {nullptr, nullptr};         // all experts, words_per_expert u32 each
  const uint8_t* scales[2] = {nullptr, nullptr};      // all experts, scales_per_expert bytes each
  const float* global_scales[2] = {nullptr, nullptr}; // [experts] (NVFP4) or null (1.0)
  int64_t words_per_expert = 0;
  int64_t scales_per_expert = 0;
  const uint16_t* x = nullptr;          // [n_x, ldx] BF16
  int64_t ldx = 0;                      // = cols_padded
  const int32_t* offsets = nullptr;     // [experts + 1]
  const int32_t* x_rows = nullptr;      // [n_assign]
  float* y = nullptr;                   // [n_assign, rows]: the output, or (fused, k_splits > 1) gate sums
  int rows = 0, strips = 0, n_chunks = 0, experts = 0, k_splits = 1;
  // Fused gate/up only: h = silu(min(g, limit)) * clamp(u, -limit, limit)
  // (no clamp when limit <= 0) in BF16, the down projection's input.
  float* y_up = nullptr;                // [n_assign, rows] up sums (k_splits > 1)
  uint16_t* h = nullptr;                // [n_assign, ldh] BF16
  int64_t ldh = 0;
  float limit = 0;
  int32_t* tickets = nullptr;           // [experts * strips], zero between launches (k_splits > 1)
};

template <int kGroup, bool kInt4>
__device__ __forceinline__ float group_scale(uint32_t code, float global_scale) {
  if constexpr (kInt4) return bf16_scale_to_f32(code);
  else if constexpr (kGroup == 32) return ue8m0_to_f32(code);
  else return e4m3_to_f32(code) * global_scale;
}

// c - 8 from the 128 + c of dequant_int4x8_biased (w4a16_int4.h), exact.
__device__ __forceinline__ uint32_t int4_unbias(uint32_t a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(kBf16x2One), "r"(kBf16x2Minus136));
  return d;
#else
  __trap();
  return 0;
#endif
}

// DeepSeek-V4's clamped SwiGLU, in moe_ref's f32 order. The clamps are
// std::min / std::clamp's comparisons, not fminf / fmaxf, so that a NaN
// passes through as on the CPU (fminf(NaN, l) is l: a fault upstream would
// come out as a finite silu(l) * u).
__device__ __forceinline__ float swiglu(float g, float u, float limit) {
  if (limit > 0) {
    g = limit < g ? limit : g;
    u = u < -limit ? -limit : (limit < u ? limit : u);
  }
  return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  // Round to nearest even, as bf16_encode (finite inputs; NaN stays NaN).
  uint32_t b = __float_as_uint(v);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40);
  b += 0x7FFFu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}

// kGateUp: the warp streams the same strip of w1 and w3 (two 16-byte loads
// per lane per chunk, so twice the bytes in flight) and writes h instead of
// y. With k_splits > 1 the splits add g and u into y / y_up; the last split
// of a strip to finish (a ticket counter) applies the SwiGLU and resets the
// ticket, so no second launch and no host sync is needed. kInt4: INT4
// codes and BF16 scales (w4a16_int4.h), group 32.
template <int kGroup, int kPasses, bool kGateUp, bool kInt4 = false>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_w4a16_kernel(const KernelParams p) {
  constexpr int kGpc = kChunkK / kGroup;               // groups per chunk: 2 or 4
  constexpr int kTilesPerGroup = kGroup / kTileK;      // 2 or 1
  constexpr int kScaleBytes = kInt4 ? 2 : 1;
  constexpr int kScaleWords = 2 * kGpc * kScaleBytes / 4;  // per lane and chunk: 1 or 2
  constexpr int kProj = kGateUp ? 2 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int e = int(item / p.strips), strip = int(item % p.strips);
  if (e >= p.experts) return;
  const int begin = p.offsets[e], count = p.offsets[e + 1] - begin;
  if (count <= 0) return;  // most warps at decode: 6 of 256 experts have tokens
  const int c0 = int(int64_t(p.n_chunks) * blockIdx.y / p.k_splits);
  const int c1 = int(int64_t(p.n_chunks) * (blockIdx.y + 1) / p.k_splits);
  const int g = lane >> 2, t = lane & 3;
  float gs[kProj];
  const uint4* wp[kProj];
  const uint8_t* sp[kProj];
#pragma unroll
  for (int pr = 0; pr < kProj; ++pr) {
    gs[pr] = p.global_scales[pr] ? p.global_scales[pr][e] : 1.0f;
    // word_index(strip, ch, n_chunks, lane, 0) / 4, in uint4, at ch = 0.
    wp[pr] = p.words[pr] + e * (p.words_per_expert / 4) + int64_t(strip) * p.n_chunks * 32 + lane;
    // scale_index(strip, ch, n_chunks, g, 0, 0, kGpc) at ch = 0.
    sp[pr] = p.scales[pr] + e * p.scales_per_expert + (int64_t(strip) * p.n_chunks * 16 * kGpc + g * 2 * kGpc) * kScaleBytes;
  }

  for (int tb = 0; tb < count; tb += kTokensPerMma * kPasses) {
    // B fragment: this lane supplies token g of each 8-token block, columns
    // 2t, 2t+1 and 2t+8, 2t+9 of every k-tile. Missing tokens multiply 0.
    const uint16_t* xr[kPasses];
#pragma unroll
    for (int nb = 0; nb < kPasses; ++nb) {
      const int j = tb + nb * kTokensPerMma + g;
      xr[nb] = j < count ? p.x + int64_t(p.x_rows[begin + j]) * p.ldx + 2 * t : nullptr;
    }
    float acc[kProj][kPasses][4] = {};
    for (int ch = c0; ch < c1; ++ch) {
      uint4 wq[kProj];
      uint32_t sc[kProj][kScaleWords];  // scales [half][gi], kScaleBytes each
#pragma unroll
      for (int pr = 0; pr < kProj; ++pr) {
        wq[pr] = __ldcs(wp[pr] + int64_t(ch) * 32);  // read once: evict first
        const uint8_t* s = sp[pr] + int64_t(ch) * 16 * kGpc * kScaleBytes;
        if constexpr (kScaleWords == 1) {
          sc[pr][0] = __ldg(reinterpret_cast<const unsigned int*>(s));
        } else {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(s));
          sc[pr][0] = v.x;
          sc[pr][1] = v.y;
        }
      }
#pragma unroll
      for (int pr = 0; pr < kProj; ++pr) {
        const uint32_t q[4] = {wq[pr].x, wq[pr].y, wq[pr].z, wq[pr].w};
        float part[kPasses][4] = {};
#pragma unroll
        for (int j = 0; j < kTilesPerChunk; ++j) {
          uint32_t a[4];
          if constexpr (kInt4) {
            dequant_int4x8_biased(q[j], a);
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = int4_unbias(a[i]);
          } else {
            dequant_fp4x8(q[j], a);
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = bf16x2_mul(a[i], kBf16x2Pow126);
          }
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
            const int b_lo = gi, b_hi = kGpc + gi;  // scale of row g, of row g+8
            constexpr int kPerWord = 4 / kScaleBytes, kBits = 8 * kScaleBytes;
            constexpr uint32_t kMask = kInt4 ? 0xFFFFu : 0xFFu;
            const float s0 =
                group_scale<kGroup, kInt4>((sc[pr][b_lo / kPerWord] >> (kBits * (b_lo % kPerWord))) & kMask, gs[pr]);
            const float s1 =
                group_scale<kGroup, kInt4>((sc[pr][b_hi / kPerWord] >> (kBits * (b_hi % kPerWord))) & kMask, gs[pr]);
#pragma unroll
            for (int nb = 0; nb < kPasses; ++nb) {
              acc[pr][nb][0] += part[nb][0] * s0;
              acc[pr][nb][1] += part[nb][1] * s0;
              acc[pr][nb][2] += part[nb][2] * s1;
              acc[pr][nb][3] += part[nb][3] * s1;
              part[nb][0] = part[nb][1] = part[nb][2] = part[nb][3] = 0.0f;
            }
          }
        }
      }
    }
    // C fragment: rows g, g+8 of the strip; tokens 2t, 2t+1 of each block.
#pragma unroll
    for (int nb = 0; nb < kPasses; ++nb)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = strip * kTileRows + g + 8 * hh;
        if (row >= p.rows) continue;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int j = tb + nb * kTokensPerMma + 2 * t + b;
          if (j >= count) continue;
          const int64_t o = int64_t(begin + j) * p.rows + row;
          if constexpr (kGateUp) {
            if (p.k_splits > 1) {
              atomicAdd(p.y + o, acc[0][nb][2 * hh + b]);
              atomicAdd(p.y_up + o, acc[1][nb][2 * hh + b]);
            } else {
              p.h[int64_t(begin + j) * p.ldh + row] =
                  to_bf16_bits(swiglu(acc[0][nb][2 * hh + b], acc[1][nb][2 * hh + b], p.limit));
            }
          } else {
            if (p.k_splits > 1) atomicAdd(p.y + o, acc[0][nb][2 * hh + b]);
            else p.y[o] = acc[0][nb][2 * hh + b];
          }
        }
      }
  }
  if constexpr (kGateUp) {
    if (p.k_splits > 1) {
      // Publish this split's sums, then take a ticket; the last split of the
      // strip sees every other split's sums (they fenced before their
      // ticket) and writes h.
      __threadfence();
      __syncwarp();
      int ticket = 0;
      int32_t* tk = p.tickets + int64_t(e) * p.strips + strip;
      if (lane == 0) ticket = atomicAdd(tk, 1);
      ticket = __shfl_sync(0xffffffffu, ticket, 0);
      // Only lane 0 met the other splits' fences through the atomic; a
      // shuffle is no memory operation, so the warp barrier orders the
      // other lanes' reads after it (PTX memory model: bar.warp.sync).
      __syncwarp();
      if (ticket == p.k_splits - 1) {
        __threadfence();
        for (int idx = lane; idx < kTileRows * count; idx += 32) {
          const int j = idx / kTileRows, row = strip * kTileRows + idx % kTileRows;
          if (row >= p.rows) continue;
          const int64_t o = int64_t(begin + j) * p.rows + row;
          p.h[int64_t(begin + j) * p.ldh + row] = to_bf16_bits(swiglu(__ldcg(p.y + o), __ldcg(p.y_up + o), p.limit));
        }
        if (lane == 0) *tk = 0;  // ready for the next launch
      }
    }
  }
}

// Defined in moe_w4a16_mxfp4.cu / moe_w4a16_nvfp4.cu: launch the instance for
// `passes` (1 or 4) token blocks of 8, fused gate/up or one projection.
void launch_mxfp4(const KernelParams& p, int passes, bool gate_up, dim3 grid, cudaStream_t stream);
void launch_nvfp4(const KernelParams& p, int passes, bool gate_up, dim3 grid, cudaStream_t stream);
void launch_int4(const KernelParams& p, int passes, bool gate_up, dim3 grid, cudaStream_t stream);  // moe_w4a16_int4.cu

}  // namespace nibble::w4a16
