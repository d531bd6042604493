// The MXFP4 instances of the W4A16 grouped expert GEMM (moe_w4a16.cuh):
// group 32, with 8 (decode) or 32 (batched) tokens per pass. One file per
// format keeps each nvcc run to two instances per arch.
#include "kernels/cuda/moe_w4a16.cuh"

namespace nibble::w4a16 {

void launch_mxfp4(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream) {
  if (passes == 1)
    moe_w4a16_kernel<32, 1><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  else
    moe_w4a16_kernel<32, 4><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
}

}  // namespace nibble::w4a16
