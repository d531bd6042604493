// The GPU indexer selection in a build without CUDA: it says so. Compiled
// only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/indexer_topk.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("indexer_topk: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_indexer_topk(const IndexerTopkArgs&) { no_cuda(); }
IndexerTopkHost cuda_indexer_topk_host(const std::vector<float>&, const std::vector<float>&, const std::vector<float>&,
                                       const std::vector<int32_t>&, int64_t, int64_t, int64_t, int64_t) {
  no_cuda();
}

}  // namespace nibble
