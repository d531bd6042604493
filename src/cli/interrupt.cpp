#include "cli/interrupt.h"

#include <signal.h>

#include <atomic>

namespace nibble::cli {

namespace {

// The only global: a signal handler can do nothing but set a flag.
std::atomic<int> g_interrupts{0};

extern "C" void on_sigint(int sig) {
  if (g_interrupts.fetch_add(1) > 0) {  // the second one: die the default way
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() { return g_interrupts.load() > 0; }

void clear_interrupt() { g_interrupts.store(0); }

}  // namespace nibble::cli
