// The kernels `nibble bench` times, named the way its flags name them, so
// that the benchmark reaches them through this header and the registry
// instead of kernels/cpu internals: a registry kernel with the SIMD path it
// runs on, or the read-only stand-ins (kernels/cpu/read_only.h) that read
// the weights through the op's structure and compute nothing.
#pragma once

#include <string>

#include "kernels/registry.h"

namespace nibble {

struct BenchKernel {
  std::string name;        // registry name ("cpu_avx512", "cpu_avx2_int8", ...) or "read"
  std::string isa;         // the SIMD path it runs: "ref", "avx2", "avx512"
  bool reference = false;  // the scalar reference: far slower, so a run times it fewer times
  LinearFn linear = nullptr;
  MoeFn moe = nullptr;
};

// Registry kernel `k` with its SIMD path.
BenchKernel bench_kernel(const KernelDesc& k);

// The read-only stand-ins ("read"), on the widest SIMD path of this CPU.
// Calling them throws nibble::Error on a CPU without AVX2.
BenchKernel read_only_bench_kernel();

// The registry name of the exact kernel of SIMD path `isa` ("ref" ->
// "cpu_ref", "avx2", "avx512", "auto" -> this host's widest). Throws
// nibble::Error naming `flag` for an unknown path or one this host cannot
// run.
std::string isa_kernel_name(const std::string& isa, const std::string& flag = "--isa");

}  // namespace nibble
