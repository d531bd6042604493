// The source tree the tests read fixtures and the shipped model from:
// $NIBBLE_SOURCE_DIR when set (a test binary run on another machine from a
// copy of the tree: scripts/gpu-check.sh), else the tree it was built from.
#pragma once

#include <cstdlib>
#include <string>

namespace nibble::test {

inline std::string source_dir() {
  const char* env = std::getenv("NIBBLE_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(NIBBLE_SOURCE_DIR);
}

}  // namespace nibble::test
