// The tensor-core linear kernel (linear_mma.h says what it computes,
// mma_layout.h the weight layout). Instantiated per weight format in
// linear_mma_{fp8,bf16}.cu, each with the two token widths the launcher
// chooses (8 tokens per pass for decode, 32 batched).
//
// Per warp: one 16-row strip, a K range, up to 8 * kPasses tokens per pass.
// Per chunk a lane makes one 16-byte streaming load of weights (FP8: two
// 16x16 tiles, BF16: one) and, per tile and 8 tokens, one mma.sync. FP8
// codes become BF16 by a shift (exact, times 2^-120) and one BF16x2 multiply
// by 2^120 (exact); the chunk's partial is then scaled in f32 by its tile
// scale, so no BF16 operand is rounded and the scale's range never passes
// through BF16. BF16 weights are the A registers as loaded.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/mma_sync.cuh"

namespace nibble::mma {

constexpr int kWarpsPerBlock = 4;

struct KernelParams {
  const uint4* words = nullptr;   // mma_layout.h
  const float* scales = nullptr;  // FP8 [row_blocks][col_blocks]
  int64_t col_blocks = 0;
  const uint16_t* x = nullptr;    // [n, ldx] BF16
  int64_t ldx = 0;                // = cols_padded
  float* y = nullptr;             // [n, rows]
  int n = 0, rows = 0, strips = 0, n_chunks = 0, k_splits = 1;
};

template <bool kFp8, int kPasses>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) linear_mma_kernel(const KernelParams p) {
  constexpr int kChunk = kFp8 ? kFp8ChunkK : kBf16ChunkK;
  constexpr int kTiles = kChunk / kTileK;
  const int lane = threadIdx.x & 31;
  const int strip = int(blockIdx.x) * kWarpsPerBlock + int(threadIdx.x >> 5);
  if (strip >= p.strips) return;
  const int c0 = int(int64_t(p.n_chunks) * blockIdx.y / p.k_splits);
  const int c1 = int(int64_t(p.n_chunks) * (blockIdx.y + 1) / p.k_splits);
  const int g = lane >> 2, t = lane & 3;
  const uint4* wp = p.words + int64_t(strip) * p.n_chunks * 32 + lane;
  // The strip's row block of tile scales (16 rows never straddle 128).
  const float* sp = kFp8 ? p.scales + int64_t(strip * kTileRows / kScaleBlock) * p.col_blocks : nullptr;

  for (int tb = 0; tb < p.n; tb += 8 * kPasses) {
    // B fragment: this lane supplies token g of each 8-token block, columns
    // 2t, 2t+1 and 2t+8, 2t+9 of every k-tile; missing tokens multiply 0.
    const uint16_t* xr[kPasses];
#pragma unroll
    for (int nb = 0; nb < kPasses; ++nb) {
      const int j = tb + nb * 8 + g;
      xr[nb] = j < p.n ? p.x + int64_t(j) * p.ldx + 2 * t : nullptr;
    }
    float acc[kPasses][4] = {};
#pragma unroll 4
    for (int ch = c0; ch < c1; ++ch) {
      const uint4 wq = __ldcs(wp + int64_t(ch) * 32);  // read once: evict first
      const uint32_t q[4] = {wq.x, wq.y, wq.z, wq.w};
      float part[kPasses][4] = {};
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        uint32_t a[4];
        if constexpr (kFp8) {
          dequant_fp8_tile(q, j, a);
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = tc::bf16x2_mul(a[i], kBf16x2Pow120);
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = q[i];
        }
        const int k0 = ch * kChunk + j * kTileK;
#pragma unroll
        for (int nb = 0; nb < kPasses; ++nb) {
          uint32_t b0 = 0, b1 = 0;
          if (xr[nb]) {
            b0 = __ldg(reinterpret_cast<const unsigned int*>(xr[nb] + k0));
            b1 = __ldg(reinterpret_cast<const unsigned int*>(xr[nb] + k0 + 8));
          }
          tc::mma_bf16_m16n8k16(kFp8 ? part[nb] : acc[nb], a, b0, b1);
        }
      }
      if constexpr (kFp8) {
        const float s = __ldg(sp + ch * kChunk / kScaleBlock);
#pragma unroll
        for (int nb = 0; nb < kPasses; ++nb)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nb][i] += part[nb][i] * s;
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
          const int j = tb + nb * 8 + 2 * t + b;
          if (j >= p.n) continue;
          float* out = p.y + int64_t(j) * p.rows + row;
          if (p.k_splits > 1) atomicAdd(out, acc[nb][2 * h + b]);
          else *out = acc[nb][2 * h + b];
        }
      }
  }
}

// linear_mma_fp8.cu / linear_mma_bf16.cu: the instance for `passes` (1 or 4).
void launch_fp8(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream);
void launch_bf16(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream);

}  // namespace nibble::mma
