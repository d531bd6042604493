// The `nibble` subcommands. Each cli/cmd_*.cpp registers one Command at
// start-up; main.cpp dispatches on the first argument.
#pragma once

#include <string>
#include <vector>

namespace nibble::cli {

struct Command {
  const char* name;     // "explain"
  const char* summary;  // one line for `nibble --help`
  int (*run)(const std::vector<std::string>& args);  // args after the name
};

std::vector<Command>& commands();

struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(c); }
};

}  // namespace nibble::cli
