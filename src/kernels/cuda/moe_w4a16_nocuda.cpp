// The W4A16 kernel's entry points in a build without CUDA: each says so.
// Compiled only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/moe_w4a16.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("moe_w4a16: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void moe_w4a16_launch(const W4A16ExpertsDevice&, const MoeGemmArgs&) { no_cuda(); }
MoeGemmHostResult moe_w4a16_run_host(const std::vector<W4A16Matrix>&, const std::vector<uint16_t>&,
                                     const std::vector<int32_t>&, const std::vector<int32_t>&, int, int) {
  no_cuda();
}

void moe_w4a16_gate_up_launch(const W4A16ExpertsDevice&, const W4A16ExpertsDevice&, const MoeGateUpArgs&) { no_cuda(); }
std::vector<float> moe_w4a16_gate_up_run_host(const std::vector<W4A16Matrix>&, const std::vector<W4A16Matrix>&,
                                              const std::vector<uint16_t>&, const std::vector<int32_t>&,
                                              const std::vector<int32_t>&, float, int) {
  no_cuda();
}

}  // namespace nibble
