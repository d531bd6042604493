// A gpt-oss (harmony) chat reply through the server's path: real tokens of
// gpt-oss's tokenizer.json decoded one at a time by TextStream, then
// ChoiceBuilder with ReplyParser::Start::Harmony. Reasoning and content
// must come out apart, markers never shown, the tool call whole.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "server/choice_builder.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace nibble::server {
namespace {

using nlohmann::json;

class HarmonyChoice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = std::filesystem::path(NIBBLE_BINARY).parent_path() / "gptoss-tokenizer" / "tokenizer.json";
    tok_ = new Tokenizer(Tokenizer::from_file(path.string()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  // The reply's tokens as the scheduler would hand them out, one per update.
  static std::vector<JobUpdate> updates(const std::string& reply) {
    const std::vector<int32_t> ids = tok_->encode(reply);
    TextStream ts([](std::span<const int32_t> t) { return tok_->decode(t); }, {});
    std::vector<JobUpdate> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      JobUpdate u;
      u.text = ts.push(ids[i]);
      u.completion_tokens = int64_t(i + 1);
      out.push_back(u);
    }
    JobUpdate last;
    last.text = ts.flush();
    last.done = true;
    last.finish_reason = "stop";
    out.push_back(last);
    return out;
  }
  static ChoiceOptions options() {
    ChoiceOptions o;
    o.thinking = true;
    o.start = ReplyParser::Start::Harmony;
    o.call_id_prefix = "call_h_";
    return o;
  }
  static Tokenizer* tok_;
};
Tokenizer* HarmonyChoice::tok_ = nullptr;

TEST_F(HarmonyChoice, AnalysisIsReasoningContentAndFinalIsContent) {
  ChoiceBuilder b(0, options(), [](int32_t t) { return tok_->decode(std::span<const int32_t>(&t, 1)); });
  for (const JobUpdate& u : updates("<|channel|>analysis<|message|>The user greets in Japanese: こんにちは.<|end|>"
                                    "<|start|>assistant<|channel|>final<|message|>こんにちは! 👋 How can I help?"))
    b.add(u);
  const json w = b.whole();
  EXPECT_EQ(w["message"]["reasoning_content"], "The user greets in Japanese: こんにちは.");
  EXPECT_EQ(w["message"]["content"], "こんにちは! 👋 How can I help?");
  EXPECT_EQ(w["finish_reason"], "stop");
}

TEST_F(HarmonyChoice, StreamedToolCallEndsTheReply) {
  ChoiceBuilder b(0, options(), [](int32_t t) { return tok_->decode(std::span<const int32_t>(&t, 1)); });
  std::string reasoning, content;
  std::vector<json> calls;
  bool stop_wanted = false;
  for (const JobUpdate& u : updates("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
                                    "commentary to=functions.get_weather <|constrain|>json<|message|>"
                                    "{\"city\": \"Paris\"}<|call|>")) {
    for (const json& c : b.stream(u)) {
      const json& d = c["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const auto& t : d["tool_calls"]) calls.push_back(t);
    }
    stop_wanted = stop_wanted || b.wants_stop();
  }
  EXPECT_EQ(reasoning, "Need weather.");
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[0]["id"], "call_h_0");
  EXPECT_TRUE(stop_wanted);  // <|call|> ends the reply
  EXPECT_EQ(b.finish_reason(), "tool_calls");
}

}  // namespace
}  // namespace nibble::server
