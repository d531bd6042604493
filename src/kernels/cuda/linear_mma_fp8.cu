// The FP8 block-128 instances of the tensor-core linear kernel (linear_mma.cuh):
// 8 (decode) or 32 (batched) tokens per pass. One file per format keeps
// each nvcc run to two instances per arch.
#include "kernels/cuda/linear_mma.cuh"

namespace nibble::mma {

void launch_fp8(const KernelParams& p, int passes, dim3 grid, cudaStream_t stream) {
  if (passes == 1)
    linear_mma_kernel<true, 1><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  else
    linear_mma_kernel<true, 4><<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
}

}  // namespace nibble::mma
