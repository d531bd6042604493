// The GPU attention core in a build without CUDA: it says so. Compiled only
// when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/attention_sinks.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("attention_sinks: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_attention_sinks(const AttentionSinksArgs&) { no_cuda(); }
std::vector<float> cuda_attention_sinks_host(const std::vector<float>&, const std::vector<float>&,
                                             const std::vector<float>&, const std::vector<int32_t>&,
                                             const std::vector<int32_t>&, const std::vector<float>&, int64_t, int64_t,
                                             int64_t, int64_t, float) {
  no_cuda();
}

}  // namespace nibble
