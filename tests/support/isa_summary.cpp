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
    // Tests parameterized by this ISA: ".../avx512", ".../avx512_int8",
    // possibly followed by "  # GetParam() = ...". (A few other kernel tests
    // loop over the ISAs inside one test and skip as a whole.)
    size_t n = 0;
    for (const auto& line : names)
      for (const char* after : {"\n", " ", "_"})
        if (line.find("/" + name + after) != std::string::npos) {
          ++n;
          break;
        }
    const std::string why = cpu_isa_unsupported(isa, host_cpu_features());
    if (why.empty()) ran += (ran.empty() ? "" : ", ") + name + " (" + std::to_string(n) + " tests named */" + name + "*)";
    else
      skipped += (skipped.empty() ? "" : "; ") + name + " kernels (" + why + "): the " + std::to_string(n) +
                 " tests named */" + name + "* and the " + name + " cases inside the other kernel tests";
  }
  if (skipped.empty()) std::printf("ISA-specific kernel tests: none skipped; ran %s\n", ran.c_str());
  else std::printf("ISA-specific kernel tests SKIPPED on this CPU: %s\n", skipped.c_str());
  return 0;
}
