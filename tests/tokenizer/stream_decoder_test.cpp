// StreamDecoder: fed one id at a time it emits only complete UTF-8, holds
// back split characters, and reproduces the full decode.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::ids_of;

class StreamFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamFixture, ReproducesTextOneIdAtATime) {
  const std::string name = GetParam();
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path(name + "_tokenizer.json"));
  const auto data = test::read_fixture(name + "_cases.json");
  size_t held_back = 0;  // tokens after which part of a character was pending
  for (const auto& c : data["cases"]) {
    const std::string text = c["text"];
    const auto ids = ids_of(c["ids"]);
    const std::string expect = c.contains("decoded") ? c["decoded"].get<std::string>() : text;
    StreamDecoder stream(tok);
    std::string got;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_EQ(utf8_first_invalid(piece), piece.size()) << "invalid UTF-8 emitted for " << test::shown(text);
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "spurious U+FFFD for " << test::shown(text);
      held_back += stream.pending_bytes() > 0;
      got += piece;
    }
    got += stream.finish();
    EXPECT_EQ(got, expect) << test::shown(text);
    EXPECT_EQ(stream.pending_bytes(), 0u);
  }
  // The fixtures contain CJK, emoji and other multi-byte text that the small
  // vocabularies split inside characters.
  EXPECT_GT(held_back, 100u);
}

TEST_P(StreamFixture, RandomIdsMatchLossyDecode) {
  const std::string name = GetParam();
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path(name + "_tokenizer.json"));
  const auto data = test::read_fixture(name + "_cases.json");
  for (const auto& d : data["decodes"]) {
    for (bool skip : {false, true}) {
      StreamDecoder stream(tok, skip);
      std::string got;
      for (int32_t id : ids_of(d["ids"])) {
        const std::string piece = stream.push(id);
        ASSERT_EQ(utf8_first_invalid(piece), piece.size());
        got += piece;
      }
      got += stream.finish();
      EXPECT_EQ(got, d[skip ? "text_skip_special" : "text"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamFixture, ::testing::Values("dsv4", "gpt2"));

// Id of the single-byte token for byte b.
int32_t byte_token(const Tokenizer& tok, uint8_t b) { return *tok.token_id(ByteLevelMap::get().char_of(b)); }

TEST(StreamDecoder, HoldsBackASplitCharacterUntilComplete) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("gpt2_tokenizer.json"));
  StreamDecoder stream(tok);
  // "€" is E2 82 AC, fed as three single-byte tokens after an 'a'.
  EXPECT_EQ(stream.push(byte_token(tok, 'a')), "a");
  EXPECT_EQ(stream.push(byte_token(tok, 0xE2)), "");
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.push(byte_token(tok, 0x82)), "");
  EXPECT_EQ(stream.pending_bytes(), 2u);
  EXPECT_EQ(stream.push(byte_token(tok, 0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(stream.pending_bytes(), 0u);
  // A 4-byte emoji (F0 9F 94 A5) cut 1+3.
  EXPECT_EQ(stream.push(byte_token(tok, 0xF0)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0x9F)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0x94)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0xA5)), "\xF0\x9F\x94\xA5");
  EXPECT_EQ(stream.finish(), "");
}

TEST(StreamDecoder, IllFormedBytesBecomeReplacementAsSoonAsCertain) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("gpt2_tokenizer.json"));
  StreamDecoder stream(tok);
  // A lone continuation byte can never start a character.
  EXPECT_EQ(stream.push(byte_token(tok, 0x80)), "\xEF\xBF\xBD");
  // E2 then 'x': the pending lead byte is replaced, 'x' comes out with it.
  EXPECT_EQ(stream.push(byte_token(tok, 0xE2)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 'x')), "\xEF\xBF\xBDx");
  // F0 80: 80 is outside F0's second-byte range 90..BF, so F0 and 80 are
  // two separate ill-formed subparts.
  EXPECT_EQ(stream.push(byte_token(tok, 0xF0)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0x80)), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // An incomplete character at the end of the stream.
  EXPECT_EQ(stream.push(byte_token(tok, 0xE4)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0xB8)), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.pending_bytes(), 0u);
}

TEST(StreamDecoder, UnknownIdThrowsAndKeepsState) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("gpt2_tokenizer.json"));
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(byte_token(tok, 0xE2)), "");
  EXPECT_THROW(stream.push(static_cast<int32_t>(tok.vocab_size()) + 5), Error);
  EXPECT_THROW(stream.push(-3), Error);
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.push(byte_token(tok, 0x82)), "");
  EXPECT_EQ(stream.push(byte_token(tok, 0xAC)), "\xE2\x82\xAC");
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("dsv4_tokenizer.json"));
  const auto ids = tok.encode("<｜begin▁of▁sentence｜>hi<｜User｜>x<｜end▁of▁sentence｜>");
  std::string with, without;
  StreamDecoder all(tok), some(tok, /*skip_special=*/true);
  for (int32_t id : ids) {
    with += all.push(id);
    without += some.push(id);
  }
  EXPECT_EQ(with, "<｜begin▁of▁sentence｜>hi<｜User｜>x<｜end▁of▁sentence｜>");
  EXPECT_EQ(without, "hi<｜User｜>x");  // <｜User｜> is not special in DeepSeek's file
}

}  // namespace
}  // namespace nibble
