// A mistake in how a command was called: an unknown flag, a flag without its
// value or with a malformed one, the wrong number of arguments. main() prints
// it like any other error but exits 2, as every --help promises, so a script
// can tell "I called it wrong" from "the work failed" (exit 1).
#pragma once

#include <sstream>

#include "util/error.h"

namespace nibble::cli {

class UsageError : public Error {
 public:
  using Error::Error;
};

// usage_fail("flag ", name, " needs a value") throws UsageError.
template <class... Parts>
[[noreturn]] void usage_fail(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw UsageError(s.str());
}

}  // namespace nibble::cli
