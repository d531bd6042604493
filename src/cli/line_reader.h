// Reads chat input a line at a time. On a terminal it uses BSD editline
// (libedit, Debian's libedit-dev): arrow keys, Ctrl-A/E, history of this
// session with up/down. On a pipe or file it reads plain lines, so scripted
// input behaves exactly as before and prints no prompt escape codes.
#pragma once

#include <string>

namespace nibble::cli {

class LineReader {
 public:
  // `interactive`: stdin is a terminal and the user sees prompts.
  explicit LineReader(bool interactive);

  // The next line without its newline, after showing `prompt` (on stderr,
  // or through editline on a terminal). False at end of input, or when the
  // read was interrupted by a signal (Ctrl-C: see cli/interrupt.h).
  bool read(const char* prompt, std::string& line);

  // Remembers a message for the up arrow (terminal only).
  void remember(const std::string& message);

 private:
  bool editline_;
};

}  // namespace nibble::cli
