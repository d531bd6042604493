// The row-wise GPU ops in a build without CUDA: they say so. Compiled only
// when the .cu files are not (cmake/cuda.cmake).
#include "kernels/cuda/row_ops.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("row_ops: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_rms_norm(const float*, int64_t, int64_t, const float*, float, float*, void*) { no_cuda(); }
void cuda_add_to_streams(const float*, int64_t, int64_t, int64_t, float*, void*) { no_cuda(); }
void cuda_gather_rows(const float*, int64_t, const int64_t*, int64_t, float*, void*) { no_cuda(); }
void cuda_copy_cols(const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t, int64_t, void*) { no_cuda(); }
void cuda_add_bias(float*, int64_t, int64_t, const float*, void*) { no_cuda(); }
void cuda_embed(const void*, Format, int64_t, int64_t, const int32_t*, int64_t, int64_t, float*, int32_t*, void*) {
  no_cuda();
}
void cuda_linear_f32(const float*, int64_t, int64_t, const float*, int64_t, float*, void*) { no_cuda(); }
std::vector<float> cuda_rms_norm_host(const std::vector<float>&, int64_t, int64_t, const std::vector<float>&, float) {
  no_cuda();
}
std::vector<float> cuda_add_to_streams_host(const std::vector<float>&, int64_t, int64_t, int64_t, std::vector<float>) {
  no_cuda();
}
std::vector<float> cuda_gather_rows_host(const std::vector<float>&, int64_t, const std::vector<int64_t>&) { no_cuda(); }
std::vector<float> cuda_copy_cols_host(const std::vector<float>&, int64_t, int64_t, std::vector<float>, int64_t,
                                       int64_t, int64_t, int64_t) {
  no_cuda();
}
std::vector<float> cuda_add_bias_host(std::vector<float>, int64_t, int64_t, const std::vector<float>&) { no_cuda(); }
std::vector<float> cuda_embed_host(const WeightView&, const std::vector<int32_t>&, int64_t) { no_cuda(); }
std::vector<float> cuda_linear_f32_host(const std::vector<float>&, int64_t, int64_t, const std::vector<float>&,
                                        int64_t) {
  no_cuda();
}

}  // namespace nibble
