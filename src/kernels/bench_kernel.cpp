#include "kernels/bench_kernel.h"

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/moe_cpu.h"
#include "kernels/cpu/read_only.h"

namespace nibble {

BenchKernel bench_kernel(const KernelDesc& k) {
  BenchKernel b;
  b.name = k.name;
  b.linear = k.linear;
  b.moe = k.moe;
  // The registry holds function pointers only: the path is the one whose
  // per-ISA entry point is that function.
  for (CpuIsa isa : {CpuIsa::ref, CpuIsa::avx2, CpuIsa::avx512})
    for (Fp4Acts acts : {Fp4Acts::f32, Fp4Acts::int8, Fp4Acts::bf16x3, Fp4Acts::int16})
      if ((b.linear && b.linear == linear_for_isa(isa, acts)) || (b.moe && b.moe == moe_for_isa(isa, acts))) {
        b.isa = cpu_isa_name(isa);
        b.reference = isa == CpuIsa::ref;
      }
  if (b.isa.empty()) b.isa = "-";  // not a CPU kernel
  return b;
}

BenchKernel read_only_bench_kernel() {
  BenchKernel b;
  b.name = "read";
  b.isa = cpu_isa_name(best_cpu_isa(host_cpu_features()));
  b.linear = linear_read_only;
  b.moe = moe_read_only;
  return b;
}

std::string isa_kernel_name(const std::string& isa, const std::string& flag) {
  return std::string("cpu_") + cpu_isa_name(parse_cpu_isa(isa, flag));
}

}  // namespace nibble
