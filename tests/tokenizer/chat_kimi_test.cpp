// Kimi K2's chat format against its published chat template: the prompts
// of kimi_chat_cases.json were rendered by jinja2 under transformers'
// settings (tools/gen_kimi_tokenizer.py) and tokenized by tiktoken; nibble's
// native encoder must give the same text and ids. Then the reply parser on
// replies written the way the template writes history calls, and the
// format's choice for a Kimi tokenizer.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_kimi.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

// OpenAI messages (as the template takes them) to nibble's; the tools of
// the conversation ride on a system message placed first, as `serve` and
// `chat` hand them over, or on the first message when that is a system one.
std::vector<ChatMessage> messages_of(const json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv["messages"]) {
    ChatMessage c;
    c.role = parse_chat_role(m["role"].get<std::string>());
    c.content = m.value("content", "");
    c.tool_call_id = m.value("tool_call_id", "");
    for (const auto& t : m.value("tool_calls", json::array()))
      c.tool_calls.push_back({t["id"], t["function"]["name"], t["function"]["arguments"]});
    out.push_back(std::move(c));
  }
  if (conv.contains("tools")) {
    // A system message of its own would add a system turn; the tools go on
    // a message that is there anyway.
    out.front().tools = conv["tools"].dump();
  }
  return out;
}

class KimiChat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::from_model_dir(test::fixture_path("kimi")));
    data_ = new json(test::read_fixture("kimi_chat_cases.json"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete data_;
  }
  static Tokenizer* tok_;
  static json* data_;
};
Tokenizer* KimiChat::tok_ = nullptr;
json* KimiChat::data_ = nullptr;

TEST_F(KimiChat, PromptsMatchThePublishedTemplate) {
  const auto& convs = (*data_)["conversations"];
  ASSERT_EQ(convs.size(), 8u);
  for (const auto& conv : convs) {
    const std::vector<ChatMessage> m = messages_of(conv);
    const std::string text = encode_kimi_chat(m);
    EXPECT_EQ(text, conv["prompt"].get<std::string>()) << conv["name"];
    EXPECT_EQ(tok_->encode(text), test::ids_of(conv["ids"])) << conv["name"];
  }
}

TEST_F(KimiChat, FormatIsChosenByTheTokenizerAndStopsAtImEnd) {
  auto tokenize = [this](const std::string& s, bool special) { return tok_->encode(s, special); };
  EXPECT_EQ(detect_chat_format("DeepseekV3ForCausalLM", tokenize), ChatFormatKind::Kimi);
  EXPECT_EQ(detect_chat_format("", tokenize), ChatFormatKind::Kimi);
  const auto f = chat_format_for("DeepseekV3ForCausalLM", tokenize);
  EXPECT_STREQ(f->name(), "kimi-k2");
  EXPECT_EQ(f->stop_tokens(), std::vector<int32_t>{*tok_->token_id("<|im_end|>")});
  const auto& conv = (*data_)["conversations"][4];
  EXPECT_EQ(f->encode(messages_of(conv), {}), test::ids_of(conv["ids"]));
  EXPECT_FALSE(f->reasons({}));
}

TEST(KimiReply, ContentAndEnd) {
  ParsedCompletion pc = parse_kimi_completion("Hello, 世界!<|im_end|>");
  EXPECT_EQ(pc.content, "Hello, 世界!");
  EXPECT_TRUE(pc.finished);
  EXPECT_TRUE(pc.tool_calls.empty());
  pc = parse_kimi_completion("Hello[EOS]");
  EXPECT_EQ(pc.content, "Hello");
  EXPECT_TRUE(pc.finished);
  pc = parse_kimi_completion("cut of", /*require_end=*/false);
  EXPECT_EQ(pc.content, "cut of");
  EXPECT_FALSE(pc.finished);
  EXPECT_THROW(parse_kimi_completion("no end"), Error);
}

TEST(KimiReply, ToolCallsAsTheTemplateWritesThem) {
  // The text the template renders for an assistant turn with two calls.
  const std::string reply =
      "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>\n"
      " <|tool_call_begin|> functions.web.search:1 <|tool_call_argument_begin|>{}<|tool_call_end|>"
      "<|tool_calls_section_end|><|im_end|>";
  const ParsedCompletion pc = parse_kimi_completion(reply);
  EXPECT_EQ(pc.content, "Checking.");
  ASSERT_EQ(pc.tool_calls.size(), 2u);
  EXPECT_EQ(pc.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(pc.tool_calls[0].name, "get_weather");
  EXPECT_EQ(pc.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(pc.tool_calls[1].id, "functions.web.search:1");
  EXPECT_EQ(pc.tool_calls[1].name, "web.search");
  EXPECT_EQ(pc.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(pc.finished);

  // Round trip: the parsed calls rendered as history give the reply's text.
  ChatMessage a;
  a.role = ChatRole::Assistant;
  a.content = pc.content;
  a.tool_calls = {pc.tool_calls[0]};
  ChatMessage u;
  u.content = "x";
  const std::vector<ChatMessage> conv = {u, a};
  const std::string prompt = encode_kimi_chat(conv);
  EXPECT_NE(prompt.find("<|im_assistant|>assistant<|im_middle|>Checking.<|tool_calls_section_begin|>"
                        "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}"
                        "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"),
            std::string::npos)
      << prompt;
}

TEST(KimiReply, CutOffCallsAndMalformedSections) {
  // Streaming cuts: an unfinished call is left out, the finished one kept.
  ParsedCompletion pc = parse_kimi_completion(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
      "<|tool_call_begin|>functions.g:1<|tool_call_argument_begin|>{\"a\":",
      false);
  ASSERT_EQ(pc.tool_calls.size(), 1u);
  EXPECT_EQ(pc.tool_calls[0].name, "f");
  EXPECT_FALSE(pc.finished);
  pc = parse_kimi_completion("<|tool_calls_section_begin|><|tool_c", false);
  EXPECT_TRUE(pc.tool_calls.empty());
  EXPECT_THROW(parse_kimi_completion("<|tool_calls_section_begin|>junk<|im_end|>"), Error);
  EXPECT_THROW(parse_kimi_completion("<|tool_calls_section_begin|><|tool_call_begin|>f:0<|im_end|>"), Error);
  EXPECT_THROW(parse_kimi_completion("<|tool_calls_section_begin|><|im_end|>"), Error);
  EXPECT_THROW(parse_kimi_completion("<|tool_calls_section_begin|><|tool_calls_section_end|>tail<|im_end|>"), Error);
  EXPECT_THROW(parse_kimi_completion("<|tool_calls_section_begin|><|tool_call_begin|><|tool_call_argument_begin|>{}"
                                     "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"),
               Error);
}

TEST(KimiPrompt, RefusesToolsThatAreNotAJsonArray) {
  ChatMessage s;
  s.role = ChatRole::System;
  s.tools = "{\"type\": \"function\"}";
  EXPECT_THROW(encode_kimi_chat(std::span<const ChatMessage>(&s, 1)), Error);
  s.tools = "[{";
  EXPECT_THROW(encode_kimi_chat(std::span<const ChatMessage>(&s, 1)), Error);
}

}  // namespace
}  // namespace nibble
