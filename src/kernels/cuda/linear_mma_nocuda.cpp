// The tensor-core linear kernels' entry points in a build without CUDA: each
// says so. Compiled only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/linear_mma.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("linear_mma: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void linear_mma_launch(const MmaWeightsDevice&, const uint16_t*, int64_t, float*, int, void*) { no_cuda(); }
void to_bf16_padded(const float*, int64_t, int64_t, int64_t, uint16_t*, void*) { no_cuda(); }
LinearMmaHostResult linear_mma_run_host(const MmaMatrix&, const std::vector<float>&, int64_t, int, int) { no_cuda(); }

}  // namespace nibble
