// The SwiGLU step in a build without CUDA: it says so. Compiled only when the
// .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/swiglu.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("swiglu: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void swiglu_bf16_launch(const float*, const float*, int64_t, int64_t, int64_t, float, uint16_t*, void*) { no_cuda(); }
std::vector<float> swiglu_bf16_run_host(const std::vector<float>&, const std::vector<float>&, int64_t, int64_t, int64_t,
                                        float) {
  no_cuda();
}

}  // namespace nibble
