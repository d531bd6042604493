#include <cstdio>

#include "cli/command.h"

namespace nibble::cli {
namespace {

int run_version(const std::vector<std::string>&) {
  std::printf("nibble 0.1.0\n");
  return 0;
}

RegisterCommand reg({"version", "print the version", run_version});

}  // namespace
}  // namespace nibble::cli
