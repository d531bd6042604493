#include "tokenizer/python_json.h"

#include "util/error.h"

namespace nibble {
namespace {

// A scalar or a key in JSON form; nlohmann rejects invalid UTF-8 by throwing.
// nlohmann's scalar forms agree with Python's for strings, integers, bools,
// null and the shortest round-trip float forms.
template <typename J>
std::string dump_scalar(const J& v) {
  try {
    return v.dump(-1, ' ', false);
  } catch (const typename J::exception& e) {
    fail("chat JSON: cannot write value: ", e.what());
  }
}

template <typename J>
void write(const J& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += dump_scalar(J(k));
      out += ": ";
      write(x, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      write(v[i], out);
    }
    out += ']';
  } else {
    out += dump_scalar(v);
  }
}

}  // namespace

std::string python_json(const nlohmann::json& v) {
  std::string out;
  write(v, out);
  return out;
}

std::string python_json(const nlohmann::ordered_json& v) {
  std::string out;
  write(v, out);
  return out;
}

}  // namespace nibble
