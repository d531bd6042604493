// What a machine offers the planner: CPU features, cores, memory bandwidth,
// or a CUDA device's compute capability. Real devices are detected; named
// hypothetical ones (`cpu-avx2`, `sm_120`, ...) let `nibble explain` plan for
// hardware that is not present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vbmi = false, avx512vnni = false, avx512bf16 = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;

  // "avx2 fma avx512f ..." for display.
  std::string describe() const;
};

enum class DeviceKind { cpu, cuda };

struct Device {
  std::string name;            // "host", "cpu-avx2", "sm_120"
  DeviceKind kind = DeviceKind::cpu;
  bool hypothetical = false;   // a named device for planning, not this machine
  CpuFeatures cpu;             // kind == cpu
  int cores = 1;               // CPU threads used, or CUDA SMs
  int sm = 0;                  // CUDA compute capability * 10 (90 = sm_90); 0 for CPUs
  double bandwidth_gbps = 0;   // memory read bandwidth, GB/s (1e9 bytes)
  std::string bandwidth_source;  // "measured", "--bandwidth flag", "nominal"
  double peak_gflops = 0;      // nominal dense compute for the cost model (f32 or tensor-core)
  uint64_t memory_bytes = 0;   // CUDA: device memory (this GPU's, or the named one's spec sheet); 0 for CPUs
  std::string description;     // one line for `explain`
};

// CPUID of this machine (with the OS's consent to use AVX/AVX-512 state).
const CpuFeatures& host_cpu_features();

// This machine as a CPU device: features, `threads` (<= 0: all hardware
// threads), and a bandwidth that is measured once per process unless
// `bandwidth_gbps` > 0 is given.
Device host_cpu_device(int threads = 0, double bandwidth_gbps = 0);

// A named device: "host" (the above), "cpu-avx2", "cpu-avx512", "sm_80",
// "sm_90", "sm_100", "sm_120", or this machine's GPU "cuda" / "cuda:N"
// (device/cuda_device.h). Throws nibble::Error listing the names.
Device named_device(const std::string& name, int threads = 0, double bandwidth_gbps = 0);
std::vector<std::string> named_device_list();

// Read bandwidth in GB/s: a read-only pass over a buffer of `bytes` (far past
// the last-level cache) with `threads` threads, best of `repeats`.
double measure_read_bandwidth_gbps(int threads, size_t bytes = size_t(1) << 30, int repeats = 3);

// XOR of [p, p + bytes), read the way both bandwidth probes read memory (as
// 8 interleaved streams: read_lines.cpp says why); the result only keeps
// the reads from being optimised away.
uint64_t read_lines(const uint8_t* p, size_t bytes);

}  // namespace nibble
