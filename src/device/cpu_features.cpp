// CPUID decoding. A feature counts only if the OS saves its register state
// (XGETBV), otherwise using it faults even though the CPU has it.
#include <cpuid.h>

#include <cstdint>

#include "device/device.h"

namespace nibble {

namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  bool avx = c & (1u << 28);
  bool fma = c & (1u << 12);
  bool f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  uint64_t xcr0 = xgetbv0();
  bool ymm_ok = (xcr0 & 0x6) == 0x6;           // SSE + AVX state
  bool zmm_ok = ymm_ok && (xcr0 & 0xE0) == 0xE0;  // opmask + ZMM state
  bool amx_ok = (xcr0 & (3ull << 17)) == (3ull << 17);  // TILECFG + TILEDATA
  if (!ymm_ok) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = b & (1u << 5);
  if (zmm_ok) {
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vbmi = c & (1u << 1);
    f.avx512vnni = c & (1u << 11);
  }
  if (amx_ok) {
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
  }
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  if (zmm_ok) f.avx512bf16 = a1 & (1u << 5);
  return f;
}

}  // namespace

const CpuFeatures& host_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vbmi, "avx512vbmi");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(amx_tile, "amx-tile");
  add(amx_int8, "amx-int8");
  add(amx_bf16, "amx-bf16");
  return s.empty() ? "baseline x86-64" : s;
}

}  // namespace nibble
