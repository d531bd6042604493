// DeviceBuffer<T>: one device allocation owned by a scope — the state of the
// host round trips that tests and benches use (`*_run_host`), never of a
// decode step (those use arenas sized once).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "device/cuda_check.cuh"

namespace nibble {

template <class T>
struct DeviceBuffer {
  T* p = nullptr;  // [n] on the current device; at least one element so an empty input is still a valid pointer

  // A copy of host[0, n), or n zeros without host: kernels that accumulate
  // (split-K, counters) and outputs a kernel only partly writes read the same
  // bytes on every run.
  explicit DeviceBuffer(size_t n, const T* host = nullptr) {
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    check_(cudaMalloc(&p, bytes), "cudaMalloc");
    if (host && n) check_(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    else check_(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // The first n elements, copied to the host (synchronises the device).
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    if (n) check_(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }

 private:
  static constexpr CudaCheck check_{"device buffer"};
};

}  // namespace nibble
