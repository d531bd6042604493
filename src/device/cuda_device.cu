// CUDA discovery and the device-memory read-bandwidth probe (the denominator
// of every GPU efficiency claim, gpu.md §7.1): a read-only kernel with 16-byte
// loads over a buffer far larger than L2, best of a few passes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "device/cuda_device.h"
#include "util/error.h"

namespace nibble {

namespace {

// Dense BF16 tensor-core multiply-adds per SM per clock, x2 for flops: the
// planner's nominal peak (spec sheets: A100 312 TF, H100 989 TF, B200 2.25 PF
// dense; GA10x / AD10x / GB20x consumer parts run BF16 with f32 accumulate at
// half the datacenter rate per SM).
double bf16_flops_per_sm_clock(int sm) {
  if (sm >= 100 && sm < 120) return 8192;
  if (sm >= 90) return sm >= 120 ? 1024 : 4096;
  if (sm == 80) return 2048;
  return 1024;  // 86, 89
}

__global__ void fill_kernel(uint4* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = make_uint4(uint32_t(i), uint32_t(i * 2654435761u), uint32_t(i >> 7), 0x9E3779B9u ^ uint32_t(i));
}

// Reads every 16-byte word once. The xor is kept alive by a store that the
// compiler cannot prove dead (it happens only if the sum equals `never`).
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, uint32_t never, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  // Four independent loads in flight per thread before their use.
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
          d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == never) sink[0] = acc;
}

void check(cudaError_t e, int index, const char* what) {
  if (e != cudaSuccess) fail("cuda:", index, ": ", what, ": ", cudaGetErrorString(e));
}

CudaProbe probe_now() {
  CudaProbe probe;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    probe.error = std::string("no CUDA device: ") +
                  (e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime reports 0 devices");
    cudaGetLastError();  // the probe's failure is answered, not left pending
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    probe.devices.push_back({i, p.name, p.major * 10 + p.minor, p.multiProcessorCount, uint64_t(p.totalGlobalMem)});
  }
  if (probe.devices.empty()) probe.error = "no CUDA device: cudaGetDeviceProperties failed for every device";
  return probe;
}

}  // namespace

const CudaProbe& cuda_probe() {
  static const CudaProbe probe = probe_now();
  return probe;
}

double cuda_read_bandwidth_gbps(int index, uint64_t bytes, int repeats) {
  check(cudaSetDevice(index), index, "cudaSetDevice");
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), index, "cudaMemGetInfo");
  // Half of the free memory at most: the probe must not starve what runs next.
  bytes = std::min<uint64_t>(bytes, free_b / 2) / 16 * 16;
  if (bytes < (uint64_t(64) << 20))
    fail("cuda:", index, ": bandwidth probe: only ", free_b, " bytes free, need at least 128 MiB");
  uint4* buf = nullptr;
  uint32_t* sink = nullptr;
  check(cudaMalloc(&buf, bytes), index, "cudaMalloc (bandwidth probe)");
  check(cudaMalloc(&sink, 4), index, "cudaMalloc (bandwidth probe)");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), index, "cudaEventCreate");
  check(cudaEventCreate(&t1), index, "cudaEventCreate");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index), index, "cudaDeviceGetAttribute");
  const size_t n = bytes / 16;
  fill_kernel<<<sms * 8, 256>>>(buf, n);
  double best_s = 1e30;
  for (int r = 0; r < std::max(repeats, 1) + 1; ++r) {  // the first pass warms up and is not counted
    cudaEventRecord(t0);
    read_kernel<<<sms * 8, 512>>>(buf, n, 0x12345678u, sink);
    cudaEventRecord(t1);
    check(cudaEventSynchronize(t1), index, "bandwidth probe kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    if (r > 0) best_s = std::min(best_s, double(ms) * 1e-3);
  }
  check(cudaGetLastError(), index, "bandwidth probe kernel");
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaFree(buf);
  cudaFree(sink);
  return double(bytes) / best_s / 1e9;
}

Device cuda_device(const std::string& spec, double bandwidth_gbps) {
  if (!is_cuda_device_spec(spec)) fail("not a CUDA device name: '", spec, "' (expected cuda or cuda:N)");
  const int index = cuda_device_index(spec);
  const CudaProbe& probe = cuda_probe();
  if (!probe.error.empty()) fail(probe.error);
  const CudaDeviceInfo* info = nullptr;
  for (const auto& d : probe.devices)
    if (d.index == index) info = &d;
  if (!info) fail("no CUDA device ", spec, ": this machine has ", probe.devices.size(), " (cuda:0..cuda:",
                  probe.devices.size() - 1, ")");
  Device d;
  d.name = "cuda:" + std::to_string(index);
  d.kind = DeviceKind::cuda;
  d.sm = info->sm;
  d.cores = info->sms;
  d.memory_bytes = info->memory_bytes;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index);
  d.peak_gflops = double(info->sms) * double(clock_khz) * 1e3 * bf16_flops_per_sm_clock(info->sm) / 1e9;
  if (bandwidth_gbps > 0) {
    d.bandwidth_gbps = bandwidth_gbps;
    d.bandwidth_source = "--bandwidth flag";
  } else {
    // Measured once per process and device: 4 GiB (or half the free memory).
    static std::mutex mu;
    static std::map<int, double> measured;
    std::lock_guard<std::mutex> lock(mu);
    auto it = measured.find(index);
    if (it == measured.end())
      it = measured.emplace(index, cuda_read_bandwidth_gbps(index, uint64_t(4) << 30)).first;
    d.bandwidth_gbps = it->second;
    d.bandwidth_source = "measured";
  }
  char desc[256];
  std::snprintf(desc, sizeof desc, "%s (sm_%d, %d SMs, %.1f GiB)", info->name.c_str(), info->sm, info->sms,
                double(info->memory_bytes) / double(1ull << 30));
  d.description = desc;
  return d;
}

}  // namespace nibble
