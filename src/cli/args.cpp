#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "cli/usage_error.h"

namespace nibble::cli {

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream s(names);
  std::string item;
  while (std::getline(s, item, ',')) out.push_back(item);
  return out;
}

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name,
                            std::string* long_name) {
  for (const auto& spec : specs) {
    auto names = split_names(spec.names);
    for (const auto& n : names) {
      if (n == name) {
        *long_name = names.back();
        return &spec;
      }
    }
  }
  return nullptr;
}

}  // namespace

std::string ParsedArgs::str(const std::string& name, const std::string& fallback) const {
  auto it = values.find(name);
  return it == values.end() ? fallback : it->second;
}

int64_t ParsedArgs::integer(const std::string& name, int64_t fallback, int64_t min,
                            int64_t max) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  const std::string& text = it->second;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    usage_fail("flag ", name, ": '", text, "' is not an integer");
  if (v < min || v > max) usage_fail("flag ", name, ": ", v, " is outside [", min, ", ", max, "]");
  return v;
}

std::vector<int64_t> ParsedArgs::integer_list(const std::string& name, const std::string& fallback, int64_t min,
                                              int64_t max, const char* what) const {
  std::vector<int64_t> out;
  const std::string s = str(name, fallback);
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
      usage_fail("flag ", name, ": '", item, "' is not ", what, " in [", min, ", ", max, "]");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

double ParsedArgs::number(const std::string& name, double fallback, double min, double max) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    usage_fail("flag ", name, ": '", text, "' is not a number");
  if (v < min || v > max) usage_fail("flag ", name, ": ", v, " is outside [", min, ", ", max, "]");
  return v;
}

std::vector<std::string> ParsedArgs::list(const std::string& name) const {
  auto it = lists.find(name);
  return it == lists.end() ? std::vector<std::string>{} : it->second;
}

ParsedArgs parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs) {
  ParsedArgs out;
  // -h/--help anywhere (before "--") wins over every other mistake on the
  // line: someone asking for help should get it, not an error about the flag
  // they were unsure of. A value that happens to be "-h" (`-p -h`) still counts
  // as a value.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help") {
      out.help = true;
      return out;
    }
    std::string long_name;
    const OptionSpec* spec = a.find('=') == std::string::npos ? find_spec(specs, a, &long_name) : nullptr;
    if (spec && !spec->metavar.empty()) ++i;  // skip its value
  }
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-' || a == "-") {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      out.help = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    std::string long_name;
    const OptionSpec* spec = find_spec(specs, name, &long_name);
    if (!spec) usage_fail("unknown flag ", name, " (see --help)");
    if (spec->metavar.empty()) {
      if (inline_value) usage_fail("flag ", name, " takes no value");
      out.values[long_name] = "1";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size())
        usage_fail("flag ", name, name == long_name ? "" : " (" + long_name + ")", " needs a value (", spec->metavar, ")");
      value = args[++i];
    }
    out.values[long_name] = value;
    out.lists[long_name].push_back(value);
  }
  return out;
}

std::string format_help(const std::string& usage, const std::string& description,
                        const std::vector<OptionSpec>& specs) {
  std::ostringstream s;
  s << "usage: " << usage << "\n";
  if (!description.empty()) s << "\n" << description << "\n";
  s << "\noptions:\n";
  size_t width = 10;
  std::vector<std::string> heads;
  for (const auto& spec : specs) {
    std::string head;
    for (const auto& n : split_names(spec.names)) head += (head.empty() ? "" : ", ") + n;
    if (!spec.metavar.empty()) head += " " + spec.metavar;
    width = std::max(width, head.size());
    heads.push_back(head);
  }
  heads.push_back("-h, --help");
  for (size_t i = 0; i < heads.size(); ++i) {
    s << "  " << heads[i] << std::string(width - heads[i].size() + 2, ' ')
      << (i < specs.size() ? specs[i].help : "show this help") << "\n";
  }
  return s.str();
}

}  // namespace nibble::cli
