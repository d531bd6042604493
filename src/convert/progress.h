// Progress of long work (a conversion, a large model loading) on stderr. On
// a terminal: one line redrawn at most ten times a second with a bar, bytes,
// rate and ETA. Otherwise (a log file, a pipe): a plain line at every tenth
// of the work, so logs stay short. Quiet mode prints nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace nibble {

class ProgressBar {
 public:
  enum class Mode { terminal, lines, quiet };
  // source: what starts each plain line ("nibble convert", "nibble serve").
  ProgressBar(FILE* out, Mode mode, std::string source = "nibble convert")
      : out_(out), mode_(mode), source_(std::move(source)) {}
  ~ProgressBar() { finish(); }

  void update(const char* phase, uint64_t done, uint64_t total);
  void finish();  // ends the line on a terminal

  // "write [=====>    ]  45%  1.23/2.71 GB  210 MB/s  ETA 0:07" in `width`
  // columns (the bar takes what is left). A pure function, for tests.
  static std::string format_line(const std::string& phase, uint64_t done, uint64_t total, double elapsed_s,
                                 int width);
  static std::string format_eta(double seconds);  // "0:07", "1:02:03", "--:--"

 private:
  using Clock = std::chrono::steady_clock;
  FILE* out_;
  Mode mode_;
  std::string source_;
  std::string phase_;
  Clock::time_point phase_start_{}, last_draw_{};
  int last_tenth_ = -1;
  bool drawn_ = false;
};

}  // namespace nibble
