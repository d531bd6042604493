#include "convert/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace nibble {

namespace {

std::string gb(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

std::string pair_gb(double done, double total) {
  char buf[48];
  if (total >= 1e9) std::snprintf(buf, sizeof buf, "%.2f/%.2f GB", done / 1e9, total / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f/%.1f MB", done / 1e6, total / 1e6);
  return buf;
}

int terminal_width(FILE* out) {
  struct winsize ws {};
  if (::ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 80;
}

}  // namespace

std::string ProgressBar::format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 99 * 3600) return "--:--";
  long s = long(std::lround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

std::string ProgressBar::format_line(const std::string& phase, uint64_t done, uint64_t total, double elapsed_s,
                                     int width) {
  const double frac = total > 0 ? std::min(1.0, double(done) / double(total)) : 1.0;
  const double rate = elapsed_s > 0 ? double(done) / elapsed_s : 0;
  const double eta = rate > 0 ? double(total - std::min(done, total)) / rate : NAN;
  char tail[128];
  std::snprintf(tail, sizeof tail, " %3d%%  %s  %s/s  ETA %s", int(frac * 100), pair_gb(double(done), double(total)).c_str(),
                gb(rate).c_str(), format_eta(eta).c_str());
  std::string head = phase + " ";
  const int bar = width - int(head.size()) - int(std::string(tail).size()) - 2;
  std::string line = head;
  if (bar >= 10) {
    const int filled = int(frac * bar);
    line += "[" + std::string(size_t(filled), '=');
    if (filled < bar) line += ">" + std::string(size_t(bar - filled - 1), ' ');
    line += "]";
  }
  return line + tail;
}

void ProgressBar::update(const char* phase, uint64_t done, uint64_t total) {
  if (mode_ == Mode::quiet) return;
  const auto now = Clock::now();
  if (phase_ != phase) {
    if (mode_ == Mode::terminal && drawn_) std::fputc('\n', out_);
    phase_ = phase;
    phase_start_ = now;
    last_tenth_ = -1;
    drawn_ = false;
  }
  const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
  const bool complete = done >= total;
  if (mode_ == Mode::terminal) {
    if (drawn_ && !complete && now - last_draw_ < std::chrono::milliseconds(100)) return;
    const int width = std::min(terminal_width(out_), 120);
    std::fprintf(out_, "\r%s\x1b[K", format_line(phase_, done, total, elapsed, width - 1).c_str());
    std::fflush(out_);
    last_draw_ = now;
    drawn_ = true;
    return;
  }
  // Plain lines only for phases long enough to be worth a log line.
  if (elapsed < 5.0 && !(complete && last_tenth_ >= 0)) return;
  const int tenth = total > 0 ? int(std::min<uint64_t>(10, done * 10 / total)) : 10;
  if (tenth == last_tenth_ || (tenth == 0 && last_tenth_ >= 0)) return;
  last_tenth_ = tenth;
  std::fprintf(out_, "%s: %s\n", source_.c_str(), format_line(phase_, done, total, elapsed, 0).c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (mode_ == Mode::terminal && drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace nibble
