// One CPU kernel variant as the kernel tests name it: an ISA and what its
// FP4 path does with activations (the exact f32 default, the opt-in int8
// and int16 ones, the opt-in AMX tiles). linear_cpu_test.cpp and moe_cpu_test.cpp run
// the same list; its names are the tests' parameter suffixes (avx512_int8,
// avx512_amx, ...).
#pragma once

#include <ostream>
#include <string>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"

namespace nibble::test {

struct KernelVariant {
  CpuIsa isa;
  Fp4Acts acts;
};

inline std::string variant_name(const KernelVariant& v) {
  const char* suffix = v.acts == Fp4Acts::int8     ? "_int8"
                       : v.acts == Fp4Acts::int16  ? "_int16"
                       : v.acts == Fp4Acts::bf16x3 ? "_amx"
                                                   : "";
  return std::string(cpu_isa_name(v.isa)) + suffix;
}

// gtest prints a parameter with this, and the instantiations below name
// their tests with variant_name.
inline void PrintTo(const KernelVariant& v, std::ostream* os) { *os << variant_name(v); }

// "" when this CPU runs the variant, else why not (the AMX one needs tiles).
inline std::string variant_unsupported(const KernelVariant& v) {
  if (v.acts == Fp4Acts::bf16x3) return amx_unsupported_here();
  return cpu_isa_unsupported(v.isa, host_cpu_features());
}

// In a test of variant v: skips it, saying why, where this CPU cannot run it.
#define SKIP_UNLESS_RUNNABLE(v)                                                             \
  if (std::string why = ::nibble::test::variant_unsupported(v); !why.empty())               \
  GTEST_SKIP() << ::nibble::test::variant_name(v) << ": " << why

// Every variant: the ones this CPU lacks skip, saying why.
#define NIBBLE_ALL_KERNEL_VARIANTS                                                                         \
  ::testing::Values(::nibble::test::KernelVariant{::nibble::CpuIsa::avx2, ::nibble::Fp4Acts::f32},        \
                    ::nibble::test::KernelVariant{::nibble::CpuIsa::avx512, ::nibble::Fp4Acts::f32},      \
                    ::nibble::test::KernelVariant{::nibble::CpuIsa::avx2, ::nibble::Fp4Acts::int8},       \
                    ::nibble::test::KernelVariant{::nibble::CpuIsa::avx512, ::nibble::Fp4Acts::int8},     \
                    ::nibble::test::KernelVariant{::nibble::CpuIsa::avx2, ::nibble::Fp4Acts::int16},      \
                    ::nibble::test::KernelVariant{::nibble::CpuIsa::avx512, ::nibble::Fp4Acts::bf16x3}),  \
      [](const auto& info) { return ::nibble::test::variant_name(info.param); }

}  // namespace nibble::test
