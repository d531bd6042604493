// The GPU routing kernels' entry points in a build without CUDA: each says
// so. Compiled only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/moe_router.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("moe_router: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void moe_route_launch(const RouteDeviceArgs&) { no_cuda(); }
void moe_group_launch(const int32_t*, int64_t, int64_t, int64_t, int32_t*, int32_t*, int32_t*, void*) { no_cuda(); }
void moe_combine_launch(const float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t, float*,
                        void*) {
  no_cuda();
}
RouteHostResult moe_route_run_host(const MoeWeights&, const std::vector<float>&, const int32_t*, int64_t) { no_cuda(); }
std::vector<float> moe_combine_run_host(const std::vector<float>&, const std::vector<int32_t>&,
                                        const std::vector<float>&, const std::vector<float>&, int64_t, int64_t,
                                        int64_t) {
  no_cuda();
}

}  // namespace nibble
