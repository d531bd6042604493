// The GPU RoPE in a build without CUDA: it says so. Compiled only when the
// .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/rope_cuda.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("rope: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_rope(const float*, int64_t, float, float*, int64_t, int64_t, int64_t, const int64_t*, bool, void*) {
  no_cuda();
}
std::vector<float> cuda_rope_host(const std::vector<float>&, float, std::vector<float>, int64_t, int64_t,
                                  const std::vector<int64_t>&, bool) {
  no_cuda();
}

}  // namespace nibble
