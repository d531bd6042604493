#include "runtime/stop_strings.h"

#include <algorithm>

#include "util/error.h"

namespace nibble {

namespace {

// The earliest complete occurrence of any stop string in `text` (npos if
// none), and which one it is.
size_t earliest_match(const std::string& text, const std::vector<std::string>& stops, std::string* which) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) {
    const size_t at = text.find(s);
    if (at < first) {
      first = at;
      *which = s;
    }
  }
  return first;
}

}  // namespace

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_)
    if (s.empty()) fail("--stop: a stop string must not be empty");
}

std::string StopStrings::push(std::string_view text) {
  if (stopped()) return "";
  pending_.append(text);
  // Text before pending_ was released only when no stop string could start
  // in it, so every match, complete or not yet, lies within pending_.
  std::string first_stop;
  const size_t first = earliest_match(pending_, stops_, &first_stop);
  // The earliest start of a possible match still incomplete: the longest
  // suffix of pending_ that is a proper prefix of some stop string. Stop
  // strings are valid UTF-8 and start with a lead byte, so a cut there never
  // splits a character of (valid UTF-8) text.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t most = std::min(s.size() - 1, pending_.size());
    for (size_t k = most; k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  const size_t partial = pending_.size() - hold;
  if (first != std::string::npos && first <= partial) {
    // Nothing can match earlier than this complete one: the text ends here.
    std::string out = pending_.substr(0, first);
    pending_.clear();
    matched_ = first_stop;
    return out;
  }
  // Release what lies before the earliest possible match (a complete match
  // after it, if any, is found again once the partial one is decided).
  std::string out = pending_.substr(0, partial);
  pending_.erase(0, partial);
  return out;
}

std::string StopStrings::finish() {
  // No more text: held-back partial matches cannot complete, but a complete
  // match after one of them may be waiting in pending_.
  std::string out = pending_.substr(0, earliest_match(pending_, stops_, &matched_));
  pending_.clear();
  return out;
}

}  // namespace nibble
