// ReplyParser::Start::Reparsed (server/reparsed_reply.h): Kimi K2's and
// DeepSeek-V3 / R1's replies streamed through the formats' whole-text
// parsers. Oracle: the same parser run once on the whole reply (itself
// checked against jinja2's renderings in tests/tokenizer); what is tested
// here is that cutting the text anywhere - at every byte, inside markers
// and inside UTF-8 characters - releases exactly that, nothing twice and no
// marker's bytes as content.
#include <gtest/gtest.h>

#include "server/reply_parser.h"
#include "tokenizer/chat_dsv3.h"
#include "tokenizer/chat_kimi.h"

namespace nibble::server {
namespace {

struct Streamed {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  bool ended = false, broken = false;
};

// `text` pushed in the pieces cut at the offsets in `at` (ascending).
Streamed stream(const WholeReplyParse& whole, const std::string& text, const std::vector<size_t>& at) {
  ReplyParser p(ReplyParser::Start::Reparsed, "", whole);
  Streamed s;
  auto take = [&](ReplyDelta d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (auto& c : d.tool_calls) s.calls.push_back(std::move(c));
  };
  size_t prev = 0;
  for (size_t a : at) {
    take(p.push(text.substr(prev, a - prev)));
    prev = a;
  }
  take(p.push(text.substr(prev)));
  take(p.finish());
  s.ended = p.ended();
  s.broken = p.broken();
  return s;
}

void expect_as_whole(const WholeReplyParse& whole, const std::string& text) {
  const ParsedCompletion want = whole(text);
  ASSERT_TRUE(want.finished) << text;
  auto check = [&](const Streamed& s, const std::string& how) {
    EXPECT_EQ(s.reasoning, want.reasoning_content) << how;
    EXPECT_EQ(s.content, want.content) << how;
    ASSERT_EQ(s.calls.size(), want.tool_calls.size()) << how;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].index, i) << how;
      EXPECT_EQ(s.calls[i].name, want.tool_calls[i].name) << how;
      EXPECT_EQ(s.calls[i].arguments, want.tool_calls[i].arguments) << how;
    }
    EXPECT_TRUE(s.ended) << how;
    EXPECT_FALSE(s.broken) << how;
  };
  check(stream(whole, text, {}), "whole");
  for (size_t i = 1; i < text.size(); ++i) check(stream(whole, text, {i}), "cut at " + std::to_string(i));
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  check(stream(whole, text, bytes), "byte by byte");
}

const WholeReplyParse kKimi = [](std::string_view t) { return parse_kimi_completion(t, /*require_end=*/false); };
const WholeReplyParse kV3 = [](std::string_view t) { return parse_dsv3_completion(t, false, /*thinking=*/false); };
const WholeReplyParse kR1 = [](std::string_view t) { return parse_dsv3_completion(t, false, /*thinking=*/true); };

TEST(ReparsedReply, KimiContentAndToolCalls) {
  expect_as_whole(kKimi, "It is 3 < 4 [sic]. Checking.<|tool_calls_section_begin|><|tool_call_begin|>"
                         "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                         "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
                         "<|tool_calls_section_end|><|im_end|>");
  expect_as_whole(kKimi, "Plain answer, café ☕.<|im_end|>");
}

TEST(ReparsedReply, DeepSeekV3AndR1) {
  expect_as_whole(kV3, "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                       "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
  expect_as_whole(kR1, "2 + 2: count <up>.</think>The answer is 4.<｜end▁of▁sentence｜>");
}

// Text after the end marker is never shown, and the reply reports ended.
TEST(ReparsedReply, NothingAfterTheEnd) {
  const Streamed s = stream(kKimi, "Done.<|im_end|>ignored", {7, 15});
  EXPECT_EQ(s.content, "Done.");
  EXPECT_TRUE(s.ended);
}

// Markup that does not parse ends the text there: what came before stays,
// the markup never shows as content.
TEST(ReparsedReply, BrokenMarkupEndsTheText) {
  const std::string text = "Before.<|tool_calls_section_begin|>garbage here<|im_end|>";
  for (size_t i = 1; i < text.size(); ++i) {
    const Streamed s = stream(kKimi, text, {i});
    EXPECT_EQ(s.content, "Before.") << "cut at " << i;
    EXPECT_TRUE(s.calls.empty());
    EXPECT_TRUE(s.broken) << "cut at " << i;
  }
}

// A cut-off reply (no end marker) releases everything at finish, a '<'
// held back as a possible marker included.
TEST(ReparsedReply, CutOffReplyReleasesItsTail) {
  const Streamed s = stream(kKimi, "a < b and x <", {3, 9});
  EXPECT_EQ(s.content, "a < b and x <");
  EXPECT_FALSE(s.ended);
}

}  // namespace
}  // namespace nibble::server
