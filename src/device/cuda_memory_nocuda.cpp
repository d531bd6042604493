// The CUDA backend's runtime calls in a build without CUDA: they say so.
// Compiled only when the .cu files are not (cmake/cuda.cmake).
#include "device/cuda_memory.h"
#include "util/error.h"

namespace nibble {

namespace {
[[noreturn]] void no_cuda() {
  fail("cuda backend: nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
}
}  // namespace

void cuda_set_device(int) { no_cuda(); }
void* cuda_device_alloc(size_t) { no_cuda(); }
void cuda_device_free(void*) {}  // nothing was ever allocated
void* cuda_host_alloc(size_t) { no_cuda(); }
void cuda_host_free(void*) {}
void* cuda_stream_create() { no_cuda(); }
void cuda_stream_destroy(void*) {}
void cuda_stream_sync(void*) { no_cuda(); }
void cuda_upload_async(void*, const void*, size_t, void*) { no_cuda(); }
void cuda_download(void*, const void*, size_t, void*) { no_cuda(); }
void cuda_memset_async(void*, int, size_t, void*) { no_cuda(); }
void cuda_copy_async(void*, const void*, size_t, void*) { no_cuda(); }

}  // namespace nibble
