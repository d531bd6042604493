// CUDA devices of this machine: discovery through the CUDA runtime and the
// read bandwidth of device memory, measured by a read-only kernel. With CUDA
// off (NIBBLE_CUDA=OFF or no nvcc) the same functions answer that nibble was
// built without CUDA (cuda_device_nocuda.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"

namespace nibble {

struct CudaDeviceInfo {
  int index = 0;            // CUDA ordinal (cuda:N)
  std::string name;         // "NVIDIA H200"
  int sm = 0;               // compute capability * 10 (90 = sm_90)
  int sms = 0;              // streaming multiprocessors
  uint64_t memory_bytes = 0;  // total device memory
};

struct CudaProbe {
  std::vector<CudaDeviceInfo> devices;
  // Empty when devices were found; else why none: "no CUDA device:
  // <cudaGetErrorString>" or "nibble was built without CUDA ...".
  std::string error;
};

// Every CUDA device of this machine (asks the runtime once per process).
const CudaProbe& cuda_probe();

// Read bandwidth of device `index` in GB/s (1e9 bytes): a read-only kernel
// (16-byte loads, one reduction per thread) over `bytes` of device memory,
// best of `repeats` timed with CUDA events. Throws nibble::Error naming the
// device and the CUDA error.
double cuda_read_bandwidth_gbps(int index, uint64_t bytes, int repeats = 5);

// "cuda" (device 0) or "cuda:N" as a planner Device: name, compute
// capability, SMs, memory, and the bandwidth measured now (once per process
// and device) unless `bandwidth_gbps` > 0. Throws nibble::Error "no CUDA
// device: ..." (with the runtime's reason) or naming the missing ordinal.
Device cuda_device(const std::string& spec, double bandwidth_gbps = 0);

// True for "cuda" and "cuda:<digits>".
bool is_cuda_device_spec(const std::string& name);
// N of "cuda:N" (0 for "cuda"); throws nibble::Error for other names.
int cuda_device_index(const std::string& spec);

}  // namespace nibble
