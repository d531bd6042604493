// Which x86 SIMD path the CPU kernels run: chosen from the detected CPU
// features, overridable (`--isa`) so that the AVX2 path is exercised on an
// AVX-512 machine too and tests can call each implementation directly.
#pragma once

#include <string>

#include "device/device.h"

namespace nibble {

enum class CpuIsa {
  ref,     // the scalar reference kernels (linear_ref, moe_ref)
  avx2,    // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  avx512,  // AVX-512 F/BW/VL/DQ + VBMI + VNNI (Ice Lake, Zen 4 and later)
};

const char* cpu_isa_name(CpuIsa isa);  // "ref", "avx2", "avx512"

// "" when a CPU with `f` can run `isa`, else the reason naming the missing
// features ("needs AVX-512 VNNI").
std::string cpu_isa_unsupported(CpuIsa isa, const CpuFeatures& f);

// The fastest ISA the features allow.
CpuIsa best_cpu_isa(const CpuFeatures& f);

// "ref" | "avx2" | "avx512" | "auto" (best for this host). Throws
// nibble::Error naming `flag` for other names and for an ISA this host
// cannot run.
CpuIsa parse_cpu_isa(const std::string& name, const std::string& flag = "--isa");

}  // namespace nibble
