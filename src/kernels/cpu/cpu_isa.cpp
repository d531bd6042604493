#include "kernels/cpu/cpu_isa.h"

#include "util/error.h"

namespace nibble {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::ref: return "ref";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

std::string cpu_isa_unsupported(CpuIsa isa, const CpuFeatures& f) {
  std::string missing;
  auto need = [&](bool have, const char* name) {
    if (!have) missing += missing.empty() ? name : std::string(", ") + name;
  };
  switch (isa) {
    case CpuIsa::ref: return "";
    case CpuIsa::avx2:
      need(f.avx2, "AVX2");
      need(f.fma, "FMA");
      need(f.f16c, "F16C");
      break;
    case CpuIsa::avx512:
      // The AVX2 set too: the AVX-512 files are compiled with its flags.
      need(f.avx2, "AVX2");
      need(f.fma, "FMA");
      need(f.f16c, "F16C");
      need(f.avx512f, "AVX-512F");
      need(f.avx512bw, "AVX-512BW");
      need(f.avx512vl, "AVX-512VL");
      need(f.avx512dq, "AVX-512DQ");
      need(f.avx512vbmi, "AVX-512 VBMI");
      need(f.avx512vnni, "AVX-512 VNNI");
      break;
  }
  return missing.empty() ? "" : "needs " + missing;
}

CpuIsa best_cpu_isa(const CpuFeatures& f) {
  if (cpu_isa_unsupported(CpuIsa::avx512, f).empty()) return CpuIsa::avx512;
  if (cpu_isa_unsupported(CpuIsa::avx2, f).empty()) return CpuIsa::avx2;
  return CpuIsa::ref;
}

CpuIsa parse_cpu_isa(const std::string& name, const std::string& flag) {
  const CpuFeatures& host = host_cpu_features();
  if (name == "auto") return best_cpu_isa(host);
  CpuIsa isa;
  if (name == "ref") isa = CpuIsa::ref;
  else if (name == "avx2") isa = CpuIsa::avx2;
  else if (name == "avx512") isa = CpuIsa::avx512;
  else fail(flag, ": unknown ISA '", name, "' (expected ref, avx2, avx512 or auto)");
  if (std::string why = cpu_isa_unsupported(isa, host); !why.empty())
    fail(flag, ": this CPU cannot run ", name, " kernels: ", why);
  return isa;
}

}  // namespace nibble
