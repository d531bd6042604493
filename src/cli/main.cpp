// `nibble` — dispatch to a subcommand; every nibble::Error becomes one line on
// stderr and exit status 1.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/command.h"
#include "util/error.h"

namespace nibble::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

namespace {

void print_usage(FILE* out) {
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const Command& a, const Command& b) { return std::string(a.name) < b.name; });
  std::fprintf(out,
               "nibble — an inference engine for FP4 Mixture-of-Experts models\n\n"
               "usage: nibble COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'nibble COMMAND --help' describes each command.\n");
}

}  // namespace
}  // namespace nibble::cli

int main(int argc, char** argv) {
  using namespace nibble::cli;
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : commands()) {
    if (name == c.name) {
      try {
        return c.run(args);
      } catch (const nibble::Error& e) {
        std::fprintf(stderr, "nibble %s: error: %s\n", c.name, e.what());
        return 1;
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "nibble %s: error: out of memory\n", c.name);
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nibble %s: internal error: %s\n", c.name, e.what());
        return 70;
      }
    }
  }
  std::fprintf(stderr, "nibble: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
