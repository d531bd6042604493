// nibble's error type. Every failure a user can cause (bad file, bad flag,
// impossible request) is thrown as nibble::Error with a message that names
// the file, tensor, field or flag at fault; the CLI prints it and exits 1.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nibble {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// fail("file ", path, ": tensor ", name, " has ", n, " bytes") throws Error.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw Error(s.str());
}

}  // namespace nibble
