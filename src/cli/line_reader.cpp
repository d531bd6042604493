#include "cli/line_reader.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <editline/readline.h>

namespace nibble::cli {

LineReader::LineReader(bool interactive) : editline_(interactive && ::isatty(STDIN_FILENO)) {
  if (editline_) {
    // Ctrl-C goes to our handler (cli/interrupt.h), which stops a reply or
    // ends the prompt; editline must not install its own.
    rl_catch_signals = 0;
    using_history();
  }
}

bool LineReader::read(const char* prompt, std::string& line) {
  if (!editline_) {
    if (prompt && *prompt) std::fputs(prompt, stderr);
    return bool(std::getline(std::cin, line));
  }
  char* got = readline(prompt);
  if (!got) return false;  // Ctrl-D, or Ctrl-C during the read
  line = got;
  std::free(got);
  return true;
}

void LineReader::remember(const std::string& message) {
  if (editline_ && !message.empty()) add_history(message.c_str());
}

}  // namespace nibble::cli
