// A small strict flag parser for the subcommands: unknown flags, missing
// values and malformed numbers are errors that name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nibble::cli {

struct OptionSpec {
  std::string names;    // "-p,--prompt" or "--json"
  std::string metavar;  // "TEXT"; empty for a boolean flag
  std::string help;     // one line; mention the default here
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // keyed by the long name, "--prompt"; the last one given
  std::map<std::string, std::vector<std::string>> lists;  // every value given, in order (repeatable flags)
  bool help = false;                          // -h/--help was given

  bool has(const std::string& name) const { return values.count(name) != 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& name, double fallback, double min, double max) const;
  // A comma-separated list of integers in [min, max] ("1,2,4"); `what`
  // names one item in the message ("a batch size").
  std::vector<int64_t> integer_list(const std::string& name, const std::string& fallback, int64_t min, int64_t max,
                                    const char* what) const;
  // Every value of a flag that may be given several times (empty if none).
  std::vector<std::string> list(const std::string& name) const;
};

// Throws nibble::Error for an unknown flag or a flag without its value.
ParsedArgs parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs);

// "usage: ...\n\ndescription\n\noptions:\n  -p, --prompt TEXT  help\n"
std::string format_help(const std::string& usage, const std::string& description,
                        const std::vector<OptionSpec>& specs);

}  // namespace nibble::cli
