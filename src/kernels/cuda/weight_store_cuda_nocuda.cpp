// The CUDA weight store in a build without CUDA: loading says so (the host
// side, weight_store.cpp, is built either way). Compiled only when the .cu
// files are not (cmake/cuda.cmake).
#include "kernels/cuda/weight_store_cuda.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("weight store: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

std::unique_ptr<CudaWeightStore> CudaWeightStore::load(const std::vector<StoreEntry>&, int, uint64_t,
                                                       const StoreProgress&, uint64_t, ThreadPool*) {
  no_cuda();
}
CudaWeightStore::~CudaWeightStore() = default;
W4A16ExpertsDevice CudaWeightStore::experts(size_t) const { no_cuda(); }
MmaWeightsDevice CudaWeightStore::linear(size_t) const { no_cuda(); }
std::vector<uint8_t> CudaWeightStore::download() const { no_cuda(); }

}  // namespace nibble
