// The host device and the named hypothetical devices. Nominal numbers are
// public spec-sheet values (bandwidth in GB/s; dense bf16/f32 peak in
// GFLOP/s); they only steer the planner's cost model and `explain`'s bound.
#include <cmath>
#include <map>
#include <mutex>

#include "device/cuda_device.h"
#include "device/device.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

namespace {

// Rough f32 FMA throughput per core per cycle for the SIMD width present.
double simd_flops_per_cycle(const CpuFeatures& f) {
  if (f.avx512f) return 64;  // 2 x 16-lane FMA
  if (f.avx2 && f.fma) return 32;
  return 8;
}

Device cpu_named(const char* name, bool avx512, int cores, double gbps, const char* desc) {
  Device d;
  d.name = name;
  d.kind = DeviceKind::cpu;
  d.hypothetical = true;
  d.cpu.avx2 = d.cpu.fma = d.cpu.f16c = true;
  if (avx512) {
    d.cpu.avx512f = d.cpu.avx512bw = d.cpu.avx512vl = d.cpu.avx512dq = true;
    d.cpu.avx512vbmi = d.cpu.avx512vnni = d.cpu.avx512bf16 = true;
  }
  d.cores = cores;
  d.bandwidth_gbps = gbps;
  d.bandwidth_source = "nominal";
  d.peak_gflops = cores * 2.5 * simd_flops_per_cycle(d.cpu);
  d.description = desc;
  return d;
}

Device cuda_named(const char* name, int sm, int sms, double gbps, double tflops, double mem_gb, const char* desc) {
  Device d;
  d.name = name;
  d.kind = DeviceKind::cuda;
  d.hypothetical = true;
  d.sm = sm;
  d.cores = sms;
  d.bandwidth_gbps = gbps;
  d.bandwidth_source = "nominal";
  d.peak_gflops = tflops * 1000;
  d.memory_bytes = uint64_t(mem_gb * 1e9);
  d.description = desc;
  return d;
}

}  // namespace

namespace {

// This machine's read bandwidth with `threads` threads: measured once per
// thread count and process (the measurement takes ~0.5 s), then reused.
// Guarded: several models may be loaded from different threads.
double cached_bandwidth_gbps(int threads) {
  static std::mutex mu;
  static std::map<int, double> measured;  // threads -> GB/s
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(threads);
  if (it == measured.end()) it = measured.emplace(threads, measure_read_bandwidth_gbps(threads, size_t(512) << 20, 3)).first;
  return it->second;
}

}  // namespace

Device host_cpu_device(int threads, double bandwidth_gbps) {
  Device d;
  d.name = "host";
  d.kind = DeviceKind::cpu;
  d.cpu = host_cpu_features();
  d.cores = threads > 0 ? threads : ThreadPool::hardware_threads();
  if (bandwidth_gbps > 0) {
    d.bandwidth_gbps = bandwidth_gbps;
    d.bandwidth_source = "--bandwidth flag";
  } else {
    d.bandwidth_gbps = cached_bandwidth_gbps(d.cores);
    d.bandwidth_source = "measured";
  }
  d.peak_gflops = d.cores * 2.5 * simd_flops_per_cycle(d.cpu);
  d.description = "this machine's CPU (" + d.cpu.describe() + ")";
  return d;
}

std::vector<std::string> named_device_list() {
  return {"host", "cpu-avx2", "cpu-avx512", "sm_80", "sm_90", "sm_100", "sm_120"};
}

Device named_device(const std::string& name, int threads, double bandwidth_gbps) {
  Device d;
  if (name == "host") return host_cpu_device(threads, bandwidth_gbps);
  if (is_cuda_device_spec(name)) return cuda_device(name, bandwidth_gbps);  // this machine's GPU
  else if (name == "cpu-avx2")
    d = cpu_named("cpu-avx2", false, 8, 60, "desktop x86-64 with AVX2, 8 cores, dual-channel DDR5");
  else if (name == "cpu-avx512")
    d = cpu_named("cpu-avx512", true, 32, 186, "server x86-64 with AVX-512 VNNI, 32 cores, 186 GB/s");
  else if (name == "sm_80")
    d = cuda_named("sm_80", 80, 108, 2039, 312, 80, "NVIDIA A100 80GB (Ampere)");
  else if (name == "sm_90")
    d = cuda_named("sm_90", 90, 132, 3350, 989, 80, "NVIDIA H100 SXM 80GB (Hopper)");
  else if (name == "sm_100")
    d = cuda_named("sm_100", 100, 148, 8000, 2250, 180, "NVIDIA B200 180GB (Blackwell datacenter)");
  else if (name == "sm_120")
    d = cuda_named("sm_120", 120, 188, 1792, 500, 96, "NVIDIA RTX PRO 6000 Blackwell 96GB (workstation)");
  else {
    std::string known;
    for (const auto& n : named_device_list()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown device '", name, "' (known: ", known, ", cuda, cuda:N)");
  }
  if (threads > 0 && d.kind == DeviceKind::cpu) d.cores = threads;
  if (bandwidth_gbps > 0) {
    d.bandwidth_gbps = bandwidth_gbps;
    d.bandwidth_source = "--bandwidth flag";
  }
  return d;
}

}  // namespace nibble
