// The harmony reply parser: each reply is fed whole, cut in two at every
// byte, and one byte at a time; every way must give the same reasoning,
// content and tool calls, and no marker may leak into the text.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/harmony_reply.h"

namespace nibble {
namespace {

struct Expect {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool ended;
};

struct Result {
  HarmonyDelta all;
  bool ended = false;
};

Result feed(const std::vector<std::string_view>& pieces) {
  HarmonyReplyParser p;
  Result r;
  auto take = [&](HarmonyDelta d) {
    r.all.reasoning += d.reasoning;
    r.all.content += d.content;
    for (auto& c : d.tool_calls) r.all.tool_calls.push_back(c);
  };
  for (std::string_view s : pieces) take(p.push(s));
  r.ended = p.ended();
  take(p.finish());
  return r;
}

void check(const std::string& text, const Expect& e) {
  std::vector<std::vector<std::string_view>> ways = {{text}};
  for (size_t i = 1; i < text.size(); ++i) ways.push_back({std::string_view(text).substr(0, i), std::string_view(text).substr(i)});
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  ways.push_back(bytes);
  for (size_t w = 0; w < ways.size(); ++w) {
    SCOPED_TRACE("text " + test::shown(text) + " way " + std::to_string(w) + " of " + std::to_string(ways.size()));
    const Result r = feed(ways[w]);
    ASSERT_EQ(r.all.reasoning, e.reasoning);
    ASSERT_EQ(r.all.content, e.content);
    ASSERT_EQ(r.all.tool_calls.size(), e.calls.size());
    for (size_t i = 0; i < e.calls.size(); ++i) {
      EXPECT_EQ(r.all.tool_calls[i].name, e.calls[i].first);
      EXPECT_EQ(r.all.tool_calls[i].arguments, e.calls[i].second);
    }
    ASSERT_EQ(r.ended, e.ended);
  }
}

TEST(HarmonyReply, AnalysisIsReasoningFinalIsContent) {
  check("<|channel|>analysis<|message|>Let me think: 2+2.<|end|><|start|>assistant<|channel|>final<|message|>It is 4."
        "<|return|>",
        {"Let me think: 2+2.", "It is 4.", {}, true});
}

TEST(HarmonyReply, TextAfterReturnIsNotPartOfTheReply) {
  check("<|channel|>final<|message|>Done<|return|>junk<|start|>assistant<|channel|>final<|message|>more",
        {"", "Done", {}, true});
}

TEST(HarmonyReply, ToolCallWithConstrainAfterReasoning) {
  check("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
        {"Need the weather.", "", {{"get_weather", "{\"city\":\"Paris\"}"}}, true});
}

TEST(HarmonyReply, RecipientBeforeChannelAndPlainJsonType) {
  // openai-harmony renders history calls this way; models write both.
  check(" to=functions.lookup<|channel|>commentary json<|message|>{\"q\": [1, 2]}<|call|>",
        {"", "", {{"lookup", "{\"q\": [1, 2]}"}}, true});
}

TEST(HarmonyReply, CommentaryPreambleIsContent) {
  check("<|channel|>commentary<|message|>Checking two cities.<|end|><|start|>assistant to=functions.w<|channel|>"
        "commentary <|constrain|>json<|message|>{}<|call|>",
        {"", "Checking two cities.", {{"w", "{}"}}, true});
}

TEST(HarmonyReply, AngleBracketsThatAreNoMarkerStayText) {
  check("<|channel|>final<|message|>a < b, <|x|> and <| stay; <|end and <|star too<|return|>",
        {"", "a < b, <|x|> and <| stay; <|end and <|star too", {}, true});
}

TEST(HarmonyReply, MultiByteTextSurvivesEverySplit) {
  check("<|channel|>analysis<|message|>考える 🤔<|end|><|start|>assistant<|channel|>final<|message|>答え: 四 ✓<|return|>",
        {"考える 🤔", "答え: 四 ✓", {}, true});
}

TEST(HarmonyReply, CutOffReplyKeepsWhatArrived) {
  // Generation stopped by the budget: no end marker.
  check("<|channel|>analysis<|message|>Thinking<|end|><|start|>assistant<|channel|>final<|message|>Partial ans",
        {"Thinking", "Partial ans", {}, false});
  // Cut while a marker was still partial: the partial marker is released
  // as text only at the very end, when it can no longer be one.
  check("<|channel|>final<|message|>text <|ret", {"", "text <|ret", {}, false});
}

TEST(HarmonyReply, StopTokenLeftOutOfTheText) {
  // The CLI and server drop the stop token (<|call|>) from the text: a call
  // whose JSON is whole is still a call; an unfinished one is dropped.
  check("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}", {"", "", {{"f", "{\"a\": 1}"}}, false});
  check("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ", {"", "", {}, false});
}

TEST(HarmonyReply, SkippedEndMarkerStartsTheNextMessage) {
  check("<|channel|>analysis<|message|>think<|channel|>final<|message|>answer<|return|>", {"think", "answer", {}, true});
}

TEST(HarmonyReply, ParseCompletionNumbersCalls) {
  const ParsedCompletion pc = parse_harmony_completion(
      "<|channel|>analysis<|message|>r<|end|><|start|>assistant to=functions.a<|channel|>commentary json<|message|>{}"
      "<|end|><|start|>assistant to=functions.b<|channel|>commentary json<|message|>{\"x\":1}<|call|>");
  EXPECT_EQ(pc.reasoning_content, "r");
  ASSERT_EQ(pc.tool_calls.size(), 2u);
  EXPECT_EQ(pc.tool_calls[0].name, "a");
  EXPECT_EQ(pc.tool_calls[1].id, "call_1");
  EXPECT_TRUE(pc.finished);
  EXPECT_FALSE(parse_harmony_completion("<|channel|>final<|message|>cut").finished);
  EXPECT_TRUE(parse_harmony_completion("<|channel|>final<|message|>whole<|return|>").finished);
}

}  // namespace
}  // namespace nibble
