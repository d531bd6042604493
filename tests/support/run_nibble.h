// Running the nibble binary (NIBBLE_BINARY, or $NIBBLE_BINARY when set) the
// way a user does, for the tests that check the command line end to end.
#pragma once

#include <string>
#include <vector>

namespace nibble::test {

struct RunResult {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs NIBBLE_BINARY with `args` (each shell-quoted) and an empty stdin.
RunResult run_nibble(const std::vector<std::string>& args);

// The same with `input` on stdin, and stdout sent to `stdout_path` instead
// of being captured when that is not empty (e.g. "/dev/full").
RunResult run_nibble(const std::vector<std::string>& args, const std::string& input,
                     const std::string& stdout_path = "");

// Runs `prefix NIBBLE_BINARY args...` through /bin/sh; `prefix` is shell
// text such as "ulimit -f 64;".
RunResult run_nibble_in_shell(const std::string& prefix, const std::vector<std::string>& args);

// Starts nibble with pipes, writes `first_input` to its stdin, waits until
// its stdout holds `wait_for` (any byte if empty; at most `timeout_s`), sends SIGINT, writes
// `then_input`, closes stdin and collects the rest. `interrupted` is set
// when the SIGINT was sent (wait_for appeared in time).
struct InterruptRun {
  RunResult result;
  bool interrupted = false;
  std::string out_at_interrupt;  // stdout when the SIGINT was sent
};
// With `after_s` >= 0 it does not wait for output: the SIGINT goes
// `after_s` seconds after the start.
InterruptRun run_nibble_interrupted(const std::vector<std::string>& args, const std::string& first_input,
                                    const std::string& wait_for, const std::string& then_input,
                                    double timeout_s = 120, double after_s = -1);

}  // namespace nibble::test
