#include "model/forward_profile.h"

#include <cstdio>

namespace nibble {

namespace {

constexpr int kPhases = int(Phase::count);
const char* const kNames[kPhases] = {"embed",      "hc",      "norm",      "attention", "attn_linear",
                                     "compressor", "indexer", "attn_core", "moe",       "head"};
// The parent of each phase, or -1 (attention's parts nest inside it).
const int kParent[kPhases] = {-1, -1, -1, -1, int(Phase::attention), int(Phase::attention), int(Phase::attention),
                              int(Phase::attention), -1, -1};

void line(std::string& out, const char* fmt, const char* name, double ms, double pct) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, name, ms, pct);
  out += buf;
}

}  // namespace

void ForwardProfile::begin_step(bool decode, int64_t tokens) {
  row_ = decode ? 0 : 1;
  steps_[size_t(row_)] += 1;
  tokens_[size_t(row_)] += tokens;
}

std::string ForwardProfile::report() const {
  std::string out;
  const char* labels[2] = {"decode steps", "prefill and mixed steps"};
  for (int row = 0; row < 2; ++row) {
    const int64_t f = steps_[size_t(row)];
    if (f == 0) continue;
    const auto& ns = ns_[size_t(row)];
    double total = 0;
    for (int p = 0; p < kPhases; ++p)
      if (kParent[p] < 0) total += double(ns[size_t(p)]);
    char head[320];
    std::snprintf(head, sizeof head, "[nibble profile] %s: %lld steps, %lld tokens, %.3f s in the phases below (%.3f ms per step)%s\n",
                  labels[row], (long long)f, (long long)tokens_[size_t(row)], total * 1e-9, total * 1e-6 / double(f),
                  barrier_ ? ", device time: each phase waited for the GPU" : "");
    out += head;
    auto pct = [&](double v) { return total > 0 ? 100 * v / total : 0.0; };
    for (int p = 0; p < kPhases; ++p) {
      if (kParent[p] >= 0) continue;
      const double v = double(ns[size_t(p)]);
      line(out, "[nibble profile]   %-12s %9.3f ms/step %5.1f%%\n", kNames[p], v * 1e-6 / double(f), pct(v));
      double children = 0;
      bool any = false;
      for (int c = 0; c < kPhases; ++c) {
        if (kParent[c] != p) continue;
        any = true;
        const double cv = double(ns[size_t(c)]);
        children += cv;
        line(out, "[nibble profile]     %-10s %9.3f ms/step %5.1f%%\n", kNames[c], cv * 1e-6 / double(f), pct(cv));
      }
      if (any)
        line(out, "[nibble profile]     %-10s %9.3f ms/step %5.1f%%\n", "other", (v - children) * 1e-6 / double(f),
             pct(v - children));
    }
  }
  return out;
}

}  // namespace nibble
