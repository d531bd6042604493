// `nibble version` (also `nibble --version` / `-V`): the version, and what
// the binary was built with, for bug reports.
#include <cstdio>

#include "cli/command.h"
#include "cli/usage_error.h"
#include "convert/quant_metadata.h"  // kNibbleVersion: the one version string (also written into converted checkpoints)

namespace nibble::cli {
namespace {

int run_version(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a != "-h" && a != "--help") usage_fail("takes no arguments, got '", a, "' (usage: nibble version)");
  std::printf("nibble %s\n", kNibbleVersion);
#if defined(__clang__)
  std::printf("built with clang %s, C++%ld\n", __clang_version__, long(__cplusplus / 100 % 100));
#elif defined(__GNUC__)
  std::printf("built with GCC %s, C++%ld\n", __VERSION__, long(__cplusplus / 100 % 100));
#endif
  return 0;
}

RegisterCommand reg({"version", "print the version (also --version, -V)", run_version});

}  // namespace
}  // namespace nibble::cli
