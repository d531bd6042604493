// StopStrings against the whole-text oracle: the streamed output, however
// the text is split into pieces, equals the full text cut at the earliest
// occurrence of any stop string (found with one find() per stop string over
// the whole text).
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

#include <random>

#include "util/error.h"

namespace nibble {
namespace {

// The oracle: cut `text` at the earliest stop string; npos when none occurs.
size_t first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops) first = std::min(first, text.find(s));
  return first;
}

std::string random_text(std::mt19937& rng, size_t len, const std::string& alphabet) {
  std::string s;
  for (size_t i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

TEST(StopStrings, StreamedOutputEqualsTheTextCutAtTheFirstStop) {
  std::mt19937 rng(7);
  int matched = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    // A 3-letter alphabet makes partial matches, overlaps and near misses common.
    const std::string text = random_text(rng, 1 + rng() % 40, "abc");
    std::vector<std::string> stops;
    const int n_stops = 1 + int(rng() % 3);
    for (int i = 0; i < n_stops; ++i) stops.push_back(random_text(rng, 1 + rng() % 5, "abc"));

    StopStrings filter(stops);
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t piece = std::min(text.size() - pos, size_t(rng() % 4));  // empty pieces too
      out += filter.push(std::string_view(text).substr(pos, piece));
      pos += piece;
    }
    out += filter.finish();

    const size_t cut = first_stop(text, stops);
    SCOPED_TRACE("text '" + text + "' first stop '" + stops[0] + "'");
    EXPECT_EQ(out, text.substr(0, cut));
    EXPECT_EQ(filter.stopped(), cut != std::string::npos);
    if (cut != std::string::npos) {
      ++matched;
      // The reported stop string is one that occurs at the cut.
      EXPECT_EQ(text.compare(cut, filter.matched().size(), filter.matched()), 0);
    }
  }
  EXPECT_GT(matched, 500);  // the random cases exercise both outcomes
  EXPECT_LT(matched, 2900);
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStillMatch) {
  StopStrings filter({"<end>"});
  EXPECT_EQ(filter.push("hello <e"), "hello ");  // "<e" may become "<end>"
  EXPECT_EQ(filter.push("x"), "<ex");            // it did not
  EXPECT_EQ(filter.push(" ok <en"), " ok ");
  EXPECT_EQ(filter.push("d> tail"), "");
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.matched(), "<end>");
  EXPECT_EQ(filter.push("more"), "");
  EXPECT_EQ(filter.finish(), "");
}

TEST(StopStrings, MultiByteTextIsCutOnCharacterBoundaries) {
  StopStrings filter({"\xE4\xB8\x96\xE7\x95\x8C"});  // "世界"
  std::string out = filter.push("\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96");  // "你好世"
  EXPECT_EQ(out, "\xE4\xBD\xA0\xE5\xA5\xBD");                            // "你好"; "世" held
  out = filter.push("\xE4\xBA\xBA");                                      // "人": no match
  EXPECT_EQ(out, "\xE4\xB8\x96\xE4\xBA\xBA");
  EXPECT_FALSE(filter.stopped());
}

TEST(StopStrings, EmptyStopStringIsAnError) {
  EXPECT_THROW(StopStrings({"ok", ""}), Error);
}

}  // namespace
}  // namespace nibble
