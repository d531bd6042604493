// Ctrl-C for the interactive commands. The first SIGINT only sets a flag:
// `run` stops generating (and still prints its timing and stop line), `chat`
// stops the reply, keeps what was generated, and returns to the prompt. A
// second SIGINT before the flag is cleared ends the program the usual way,
// so a stuck prefill can still be killed.
#pragma once

namespace nibble::cli {

// Installs the handler (without SA_RESTART, so a blocked read of stdin
// returns and the flag is seen).
void install_interrupt_handler();

// A SIGINT arrived since the last clear_interrupt().
bool interrupted();
void clear_interrupt();

}  // namespace nibble::cli
