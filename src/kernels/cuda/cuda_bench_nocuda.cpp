// The GPU benchmarks in a build without CUDA: each says so. Compiled only
// when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/cuda_bench.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("no CUDA device: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

CudaBenchReport cuda_bench_linear(Format, int64_t, int64_t, const std::vector<int64_t>&, int) { no_cuda(); }
CudaBenchReport cuda_bench_moe(Format, const std::vector<int64_t>&, int) { no_cuda(); }
CudaBenchReport cuda_bench_moe_layer(Format, const std::vector<int64_t>&, int) { no_cuda(); }

}  // namespace nibble
