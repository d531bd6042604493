// The attention state kernels in a build without CUDA: they say so.
// Compiled only when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/attention_state.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("attention_state: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_ring_store(float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, const float*, int64_t, void*) {
  no_cuda();
}
void cuda_ring_load(const float*, int64_t, int64_t, int64_t, int64_t, float*, void*) { no_cuda(); }
void cuda_compressor_pool(const float*, const float*, int64_t, int64_t, int64_t, int64_t, bool, int64_t, int64_t,
                          float*, void*) {
  no_cuda();
}
void cuda_attention_key_lists(int64_t, int64_t, int64_t, int64_t, int, int64_t, int64_t, const int32_t*,
                              const int32_t*, int64_t, int64_t, int32_t*, int32_t*, void*) {
  no_cuda();
}
std::vector<float> cuda_ring_store_host(std::vector<float>, int64_t, const std::vector<float>&, int64_t, int64_t,
                                        const std::vector<float>&, int64_t) {
  no_cuda();
}
std::vector<float> cuda_compressor_pool_host(const std::vector<float>&, const std::vector<float>&, int64_t, int64_t,
                                             int64_t, bool, int64_t, int64_t) {
  no_cuda();
}
KeyListsHost cuda_attention_key_lists_host(int64_t, int64_t, int64_t, int64_t, int, int64_t, int64_t,
                                           const std::vector<int32_t>&, const std::vector<int32_t>&, int64_t,
                                           int64_t) {
  no_cuda();
}

}  // namespace nibble
