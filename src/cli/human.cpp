#include "cli/human.h"

#include <cstdio>

namespace nibble::cli {

namespace {
std::string scaled(double v, const char* const* units, int n_units, const char* sep) {
  int u = 0;
  while (u + 1 < n_units && (v >= 1000 || v <= -1000)) {
    v /= 1000;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s%s" : "%.2f%s%s", v, sep, units[u]);
  return buf;
}
}  // namespace

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "kB", "MB", "GB", "TB"};
  return scaled(bytes, units, 5, " ");
}

std::string human_count(double n) {
  static const char* const units[] = {"", "K", "M", "B", "T"};
  return scaled(n, units, 5, "");
}

}  // namespace nibble::cli
