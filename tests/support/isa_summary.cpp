// One line for `make test`: which ISA-specific kernel tests this CPU could
// not run and why. Those tests report SKIPPED inside ctest, whose summary
// lists them one by one without the reason; this names the reason once.
// Run from a build folder (it asks `ctest -N` for the test names).
#include <cstdio>
#include <string>
#include <vector>

#include "device/device.h"
#include "kernels/cpu/cpu_isa.h"

int main() {
  using namespace nibble;
  std::vector<std::string> names;
  if (FILE* p = ::popen("ctest -N 2>/dev/null", "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) names.emplace_back(buf);
    ::pclose(p);
  }
  std::string skipped, ran;
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    const std::string name = cpu_isa_name(isa);
    size_t n = 0;  // tests parameterized by this ISA: ".../avx512", ".../avx512_int8"
    for (const auto& line : names)
      if (line.find("/" + name + "\n") != std::string::npos || line.find("/" + name + "_") != std::string::npos) ++n;
    const std::string why = cpu_isa_unsupported(isa, host_cpu_features());
    if (why.empty()) ran += (ran.empty() ? "" : ", ") + name + " (" + std::to_string(n) + " tests)";
    else skipped += (skipped.empty() ? "" : "; ") + std::to_string(n) + " " + name + " kernel tests (" + why + ")";
  }
  if (skipped.empty()) std::printf("ISA-specific kernel tests: none skipped; ran %s\n", ran.c_str());
  else std::printf("ISA-specific kernel tests SKIPPED on this CPU: %s\n", skipped.c_str());
  return 0;
}
