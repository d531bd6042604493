#include "model/forward_profile.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nibble {

namespace {

constexpr int kPhases = int(Phase::count);
const char* const kNames[kPhases] = {"embed",      "hc",      "norm",      "attention", "attn_linear",
                                     "compressor", "indexer", "attn_core", "moe",       "head"};
// The parent of each phase, or -1 (attention's parts nest inside it).
const int kParent[kPhases] = {-1, -1, -1, -1, int(Phase::attention), int(Phase::attention), int(Phase::attention),
                              int(Phase::attention), -1, -1};

// [0]: decode steps, [1]: prefill chunks.
struct Totals {
  std::array<std::array<std::atomic<int64_t>, kPhases>, 2> ns{};
  std::array<std::atomic<int64_t>, 2> forwards{};
  std::array<std::atomic<int64_t>, 2> tokens{};
};

std::atomic<int> g_mode{0};  // which row the running forward adds to

void print_row(const Totals& t, int row, const char* label) {
  const int64_t f = t.forwards[size_t(row)].load();
  if (f == 0) return;
  double total = 0;
  for (int p = 0; p < kPhases; ++p)
    if (kParent[p] < 0) total += double(t.ns[size_t(row)][size_t(p)].load());
  std::fprintf(stderr, "[nibble profile] %s: %lld forwards, %lld tokens, %.3f s in the phases below (%.3f ms per forward)\n",
               label, (long long)f, (long long)t.tokens[size_t(row)].load(), total * 1e-9, total * 1e-6 / double(f));
  for (int p = 0; p < kPhases; ++p) {
    if (kParent[p] >= 0) continue;
    const double ns = double(t.ns[size_t(row)][size_t(p)].load());
    std::fprintf(stderr, "[nibble profile]   %-12s %9.3f ms/forward %5.1f%%\n", kNames[p], ns * 1e-6 / double(f),
                 total > 0 ? 100 * ns / total : 0.0);
    double children = 0;
    bool any = false;
    for (int c = 0; c < kPhases; ++c) {
      if (kParent[c] != p) continue;
      any = true;
      const double cns = double(t.ns[size_t(row)][size_t(c)].load());
      children += cns;
      std::fprintf(stderr, "[nibble profile]     %-10s %9.3f ms/forward %5.1f%%\n", kNames[c], cns * 1e-6 / double(f),
                   total > 0 ? 100 * cns / total : 0.0);
    }
    if (any)
      std::fprintf(stderr, "[nibble profile]     %-10s %9.3f ms/forward %5.1f%%\n", "other",
                   (ns - children) * 1e-6 / double(f), total > 0 ? 100 * (ns - children) / total : 0.0);
  }
}

// Prints at exit (static destruction) when profiling was on.
struct Report {
  Totals totals;
  ~Report() {
    if (!forward_profile_enabled()) return;
    print_row(totals, 0, "decode");
    print_row(totals, 1, "prefill");
  }
};

Report& report() {
  static Report r;
  return r;
}

}  // namespace

bool forward_profile_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("NIBBLE_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void forward_profile_begin(int64_t tokens) {
  if (!forward_profile_enabled()) return;
  const int row = tokens == 1 ? 0 : 1;
  g_mode.store(row, std::memory_order_relaxed);
  Totals& t = report().totals;
  t.forwards[size_t(row)].fetch_add(1, std::memory_order_relaxed);
  t.tokens[size_t(row)].fetch_add(tokens, std::memory_order_relaxed);
}

PhaseTimer::~PhaseTimer() {
  if (!on_) return;
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
  report().totals.ns[size_t(g_mode.load(std::memory_order_relaxed))][size_t(phase_)].fetch_add(
      ns, std::memory_order_relaxed);
}

}  // namespace nibble
