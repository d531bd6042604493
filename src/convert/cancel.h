// Interruption of a long conversion. The command line turns SIGINT / SIGTERM
// / SIGHUP into a number in an atomic flag; the converter polls it between
// chunks (at most 4 MB apart) and unwinds with Interrupted, whose
// destructors remove everything half-written.
#pragma once

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

#include "util/error.h"

namespace nibble {

class Interrupted : public Error {
 public:
  explicit Interrupted(int sig)
      : Error(std::string("interrupted by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")"),
        signal_(sig) {}
  int signal_number() const { return signal_; }

 private:
  int signal_;
};

// Throws Interrupted when `cancel` holds a signal number.
inline void check_cancel(const std::atomic<int>* cancel) {
  if (!cancel) return;
  if (int sig = cancel->load(std::memory_order_relaxed); sig != 0) throw Interrupted(sig);
}

}  // namespace nibble
