// The harmony reply parser: each reply is fed whole, cut in two at every
// byte, and one byte at a time; every way must give the same reasoning,
// content and tool calls, and no marker may leak into the text.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/chat_harmony.h"
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

namespace nibble {
namespace {

TEST(HarmonyReply, ForcedCallHeaderMakesTheReplyTheArguments) {
  // A named tool_choice: the prompt already holds the call's header.
  const std::string head = harmony_forced_call_header("get_weather");
  EXPECT_EQ(head, " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>");
  const std::string reply = "{\"city\": \"Rome\"}<|call|>";
  for (size_t cut = 0; cut <= reply.size(); ++cut) {
    HarmonyReplyParser p(head);
    HarmonyDelta a = p.push(reply.substr(0, cut)), b = p.push(reply.substr(cut)), c = p.finish();
    std::vector<ToolCall> calls = a.tool_calls;
    calls.insert(calls.end(), b.tool_calls.begin(), b.tool_calls.end());
    calls.insert(calls.end(), c.tool_calls.begin(), c.tool_calls.end());
    ASSERT_EQ(calls.size(), 1u) << cut;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, "{\"city\": \"Rome\"}");
    EXPECT_TRUE(a.content.empty() && b.content.empty() && a.reasoning.empty());
  }
}

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

// Pieces in order, then finish() (operands of + are not sequenced).
std::string view_of(const std::vector<std::string>& pieces) {
  HarmonyTextView v;
  std::string shown;
  for (const auto& p : pieces) shown += v.push(p);
  shown += v.finish();
  return shown;
}

TEST(HarmonyTextView, ReasoningInThinkTagsThenTheAnswerAtEverySplit) {
  const std::string reply =
      "<|channel|>analysis<|message|>Sum it.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>";
  for (size_t cut = 0; cut <= reply.size(); ++cut)
    ASSERT_EQ(view_of({reply.substr(0, cut), reply.substr(cut)}), "<think>\nSum it.\n</think>\n\n4") << cut;
  // The budget ended it inside the reasoning.
  EXPECT_EQ(view_of({"<|channel|>analysis<|message|>Hmm"}), "<think>\nHmm\n</think>\n\n");
  EXPECT_EQ(view_of({"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"}),
            "\n[tool call] f {}\n");
  EXPECT_EQ(view_of({"<|channel|>final<|message|>ok"}), "ok");  // no reasoning: the answer alone
}

}  // namespace
}  // namespace nibble
