// The INT4 instances of the W4A16 grouped expert GEMM (moe_w4a16.cuh):
// compressed-tensors pack-quantized, group 32, BF16 scales (w4a16_int4.h);
// 8 (decode) or 32 (batched) tokens per pass, one projection or gate/up
// fused with the SwiGLU. One file per format, as moe_w4a16_{mxfp4,nvfp4}.cu.
#include "kernels/cuda/moe_w4a16.cuh"

namespace nibble::w4a16 {

void launch_int4(const KernelParams& p, int passes, bool gate_up, dim3 grid, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  if (gate_up) {
    if (passes == 1) moe_w4a16_kernel<32, 1, true, true><<<grid, kThreads, 0, stream>>>(p);
    else moe_w4a16_kernel<32, 4, true, true><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (passes == 1) moe_w4a16_kernel<32, 1, false, true><<<grid, kThreads, 0, stream>>>(p);
    else moe_w4a16_kernel<32, 4, false, true><<<grid, kThreads, 0, stream>>>(p);
  }
}

}  // namespace nibble::w4a16
