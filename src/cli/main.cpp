// `nibble` — dispatch to a subcommand; every nibble::Error becomes one line on
// stderr and exit status 1 (2 for a UsageError: the command was called
// wrong). Whatever a command printed, a write to stdout that failed (a full
// disk, `> /dev/full`, a closed pipe) makes the exit status non-zero too:
// silently truncated output must not look like success.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <exception>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/usage_error.h"
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
  std::fprintf(out, "\n'nibble COMMAND --help' describes each command; 'nibble --version' prints the version.\n"
                    "Exit status: 0 done, 1 error, 2 bad usage.\n");
}

// Flushes stdout (both the C stream and std::cout, which share it) and says
// whether everything written to it arrived. Returns `status` if so, else
// prints why on stderr and returns 1.
int check_stdout(const char* who, int status) {
  errno = 0;
  std::cout.flush();  // may flush stdout itself (the streams are synchronised) and set errno
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return status;
  std::fprintf(stderr, "%s: error: writing to stdout failed%s%s\n", who, err ? ": " : "",
               err ? std::strerror(err) : "");
  return status == 0 ? 1 : status;
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
    return check_stdout("nibble", 0);
  }
  if (name == "-V" || name == "--version") name = "version";
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : commands()) {
    if (name == c.name) {
      const std::string who = std::string("nibble ") + c.name;
      try {
        return check_stdout(who.c_str(), c.run(args));
      } catch (const UsageError& e) {
        std::fprintf(stderr, "nibble %s: error: %s\n", c.name, e.what());
        return 2;
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
