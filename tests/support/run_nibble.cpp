#include "support/run_nibble.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "support/temp_dir.h"

namespace nibble::test {

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// $NIBBLE_BINARY when set (a test binary run from a bundle on another
// machine: scripts/gpu-check.sh), else the one built beside the tests.
std::string nibble_binary() {
  const char* env = std::getenv("NIBBLE_BINARY");
  return env && *env ? std::string(env) : std::string(NIBBLE_BINARY);
}

}  // namespace

RunResult run_nibble(const std::vector<std::string>& args) { return run_nibble(args, "", ""); }

RunResult run_nibble(const std::vector<std::string>& args, const std::string& input,
                     const std::string& stdout_path) {
  TempDir io;
  write_file(io.str("in"), input);
  std::string cmd = shell_quote(nibble_binary());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  const std::string out = stdout_path.empty() ? io.str("out") : stdout_path;
  cmd += " >" + shell_quote(out) + " 2>" + shell_quote(io.str("err")) + " <" + shell_quote(io.str("in"));
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stdout_path.empty()) r.out = read_file(io.str("out"));
  r.err = read_file(io.str("err"));
  return r;
}

RunResult run_nibble_in_shell(const std::string& prefix, const std::vector<std::string>& args) {
  TempDir io;
  std::string cmd = prefix + " " + shell_quote(nibble_binary());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(io.str("out")) + " 2>" + shell_quote(io.str("err")) + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(io.str("out"));
  r.err = read_file(io.str("err"));
  return r;
}

InterruptRun run_nibble_interrupted(const std::vector<std::string>& args, const std::string& first_input,
                                    const std::string& wait_for, const std::string& then_input,
                                    double timeout_s, double after_s) {
  TempDir io;
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) throw std::runtime_error("pipe failed");
  const std::string err_path = io.str("err");
  std::vector<std::string> argv_s = {nibble_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(in_pipe[1]);
    close(out_pipe[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  ::signal(SIGPIPE, SIG_IGN);
  auto write_all = [&](const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = write(in_pipe[1], s.data() + done, s.size() - done);
      if (n <= 0) break;
      done += size_t(n);
    }
  };
  InterruptRun run;
  write_all(first_input);
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  char buf[4096];
  bool eof = false;
  auto seen = [&] {
    if (after_s >= 0) return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= after_s;
    return !out.empty() && out.find(wait_for) != std::string::npos;
  };
  while (!eof && !seen()) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) break;
    pollfd p{out_pipe[0], POLLIN, 0};
    if (poll(&p, 1, after_s >= 0 ? 50 : int(left * 1000)) <= 0) continue;
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) eof = true;
    else out.append(buf, size_t(n));
  }
  if (!eof && seen()) {
    run.interrupted = true;
    run.out_at_interrupt = out;
    kill(pid, SIGINT);
  }
  write_all(then_input);
  close(in_pipe[1]);
  while (!eof) {
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) eof = true;
    else out.append(buf, size_t(n));
  }
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.result.out = out;
  run.result.err = read_file(err_path);
  return run;
}

}  // namespace nibble::test
