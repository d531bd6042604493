// GPU sampling in a build without CUDA: it says so. Compiled only when the
// .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/sampling.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("sampling: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

size_t cuda_sample_workspace_bytes(int64_t, int64_t) { no_cuda(); }
void cuda_sample(const float*, int64_t, int64_t, int64_t, const DrawParams*, void*, size_t, int32_t*, void*) {
  no_cuda();
}
std::vector<int32_t> cuda_sample_host(const std::vector<float>&, int64_t, int64_t,
                                      const std::vector<DrawParams>&) {
  no_cuda();
}

}  // namespace nibble
