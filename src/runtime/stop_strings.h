// Stop strings for streamed generation (`--stop TEXT`): text is released as
// it is generated, except a tail that could still grow into a stop string,
// which is held back until the next piece decides it. When a stop string
// appears, everything before it is released and nothing after it, so the
// streamed text equals the full text cut at the first stop string, as the
// OpenAI API's `stop` behaves.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nibble {

class StopStrings {
 public:
  // Throws nibble::Error for an empty stop string (it would match at once).
  explicit StopStrings(std::vector<std::string> stops);

  // Appends generated text; returns the part that can be shown now. After a
  // stop string has matched, returns "" and ignores further text.
  std::string push(std::string_view text);

  // The end of generation: returns the held-back tail ("" after a match).
  std::string finish();

  bool stopped() const { return !matched_.empty(); }
  // The stop string that ended the text ("" while none has).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a suffix that is a prefix of some stop
  std::string matched_;
};

}  // namespace nibble
