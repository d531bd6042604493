// The GPU hyper-connections in a build without CUDA: they say so. Compiled
// only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/hyper_conn.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("hyper_conn: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_hc_pre_finish(const HcDeviceParams&, const float*, const float*, int64_t, float*, float*, float*, void*) {
  no_cuda();
}
void cuda_hc_post(int64_t, int64_t, const float*, const float*, const float*, int64_t, float*, void*) { no_cuda(); }
void cuda_hc_head_finish(const HcDeviceParams&, const float*, const float*, int64_t, float*, void*) { no_cuda(); }
HcPreHost cuda_hc_pre_finish_host(HcDeviceParams, const std::vector<float>&, const std::vector<float>&,
                                  const std::vector<float>&, const std::vector<float>&, int64_t) {
  no_cuda();
}
std::vector<float> cuda_hc_post_host(int64_t, int64_t, const std::vector<float>&, const std::vector<float>&,
                                     const std::vector<float>&, int64_t, std::vector<float>) {
  no_cuda();
}
std::vector<float> cuda_hc_head_finish_host(HcDeviceParams, const std::vector<float>&, const std::vector<float>&,
                                            const std::vector<float>&, const std::vector<float>&, int64_t) {
  no_cuda();
}

}  // namespace nibble
