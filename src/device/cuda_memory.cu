#include "device/cuda_memory.h"

#include <cuda_runtime.h>

#include "device/cuda_check.cuh"
#include "util/error.h"

namespace nibble {

namespace {
constexpr CudaCheck check{"cuda backend"};
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

void cuda_set_device(int index) { check(cudaSetDevice(index), "cudaSetDevice"); }

void* cuda_device_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) fail("cuda backend: cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(e));
  return p;
}

void cuda_device_free(void* p) {
  // Not checked: frees run in destructors, and an error here is one an
  // earlier kernel left behind (sticky), already reported by the sync that
  // met it or about to be by the next.
  if (p) (void)cudaFree(p);
}

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) fail("cuda backend: cudaMallocHost of ", bytes, " bytes: ", cudaGetErrorString(e));
  return p;
}

void cuda_host_free(void* p) {
  if (p) cudaFreeHost(p);
}

void* cuda_stream_create() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

void cuda_stream_destroy(void* stream) {
  if (stream) cudaStreamDestroy(as_stream(stream));
}

void cuda_stream_sync(void* stream) { check(cudaStreamSynchronize(as_stream(stream)), "a step's kernels"); }

void cuda_upload_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)), "upload");
}

void cuda_download(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)), "download");
  cuda_stream_sync(stream);
}

void cuda_memset_async(void* dst, int value, size_t bytes, void* stream) {
  if (bytes) check(cudaMemsetAsync(dst, value, bytes, as_stream(stream)), "cudaMemsetAsync");
}

void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)), "device copy");
}

}  // namespace nibble
