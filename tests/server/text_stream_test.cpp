// TextStream with a fake decoder: token i decodes to pieces[i], and a piece
// that ends inside a UTF-8 character decodes (alone) with U+FFFD, as the
// real decoder does.
#include <gtest/gtest.h>

#include "server/text_stream.h"

namespace nibble::server {
namespace {

// Bytes per token; decode() concatenates and replaces an incomplete
// trailing character with U+FFFD.
std::vector<std::string> pieces;

std::string fake_decode(std::span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s += pieces[size_t(id)];
  // An incomplete trailing UTF-8 sequence -> U+FFFD.
  size_t i = s.size(), back = 0;
  while (i > 0 && back < 4 && (uint8_t(s[i - 1]) & 0xC0) == 0x80) --i, ++back;
  if (i > 0) {
    const uint8_t lead = uint8_t(s[i - 1]);
    const size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    if (need > back) s = s.substr(0, i - 1) + "\xEF\xBF\xBD";
  }
  return s;
}

std::string run(const std::vector<std::string>& p, const std::vector<std::string>& stops, bool* stopped = nullptr) {
  pieces = p;
  TextStream ts(fake_decode, stops);
  std::string out;
  for (size_t i = 0; i < p.size() && !ts.stopped(); ++i) out += ts.push(int32_t(i));
  if (stopped) *stopped = ts.stopped();
  out += ts.flush();
  EXPECT_EQ(out, ts.sent());
  return out;
}

TEST(TextStream, PassesTextThrough) { EXPECT_EQ(run({"Hel", "lo", " world"}, {}), "Hello world"); }

TEST(TextStream, HoldsBackASplitCharacter) {
  pieces = {"a\xC3", "\xA9", "b"};  // "aéb" with é split across tokens
  TextStream ts(fake_decode, {});
  EXPECT_EQ(ts.push(0), "a");
  EXPECT_EQ(ts.push(1), "\xC3\xA9");
  EXPECT_EQ(ts.push(2), "b");
}

TEST(TextStream, StopsAtAStopStringSplitAcrossTokens) {
  bool stopped = false;
  EXPECT_EQ(run({"one ST", "O", "P two"}, {"STOP"}, &stopped), "one ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"xSTOPy"}, {"STOP"}, &stopped), "x");
  EXPECT_EQ(run({"ab", "cd"}, {"zz", "bc"}, &stopped), "a");
}

TEST(TextStream, ReleasesAHeldPrefixThatIsNoStopString) {
  pieces = {"one ST", "ART"};
  TextStream ts(fake_decode, {"STOP"});
  EXPECT_EQ(ts.push(0), "one ");
  EXPECT_EQ(ts.push(1), "START");
  EXPECT_FALSE(ts.stopped());
  // And at the end of generation what is held back is sent.
  bool stopped = true;
  EXPECT_EQ(run({"abc S"}, {"STOP"}, &stopped), "abc S");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace nibble::server
