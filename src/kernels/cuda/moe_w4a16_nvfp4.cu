// The NVFP4 instances of the W4A16 grouped expert GEMM (moe_w4a16.cuh):
// group 16, 8 (decode) or 32 (batched) tokens per pass, one projection or
// gate/up fused with the SwiGLU. One file per format keeps each nvcc run
// to four instances per arch.
#include "kernels/cuda/moe_w4a16.cuh"

namespace nibble::w4a16 {

void launch_nvfp4(const KernelParams& p, int passes, bool gate_up, dim3 grid, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  if (gate_up) {
    if (passes == 1) moe_w4a16_kernel<16, 1, true><<<grid, kThreads, 0, stream>>>(p);
    else moe_w4a16_kernel<16, 4, true><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (passes == 1) moe_w4a16_kernel<16, 1, false><<<grid, kThreads, 0, stream>>>(p);
    else moe_w4a16_kernel<16, 4, false><<<grid, kThreads, 0, stream>>>(p);
  }
}

}  // namespace nibble::w4a16
