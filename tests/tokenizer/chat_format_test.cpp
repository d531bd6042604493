// The chat format chosen per model, and that each format behind the
// interface is exactly its own encoder and parser.
#include <gtest/gtest.h>

#include <filesystem>

#include "fixtures.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_harmony.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

TokenizeFn fn(const Tokenizer& t) {
  return [&t](const std::string& s, bool special) { return t.encode(s, special); };
}

class ChatFormatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gptoss_ = new Tokenizer(Tokenizer::from_file(test::gptoss_tokenizer_dir() + "/tokenizer.json"));
    dsv4_ = new Tokenizer(Tokenizer::from_file(test::fixture_path("dsv4_tokenizer.json")));
  }
  static void TearDownTestSuite() {
    delete gptoss_;
    delete dsv4_;
  }
  static Tokenizer* gptoss_;
  static Tokenizer* dsv4_;
};
Tokenizer* ChatFormatTest::gptoss_ = nullptr;
Tokenizer* ChatFormatTest::dsv4_ = nullptr;

TEST_F(ChatFormatTest, ChosenByArchitectureThenByTokenizer) {
  EXPECT_EQ(detect_chat_format("GptOssForCausalLM", fn(*dsv4_)), ChatFormatKind::Harmony);
  EXPECT_EQ(detect_chat_format("DeepseekV4ForCausalLM", fn(*gptoss_)), ChatFormatKind::DeepSeekV4);
  EXPECT_EQ(detect_chat_format("", fn(*gptoss_)), ChatFormatKind::Harmony);
  EXPECT_EQ(detect_chat_format("SomethingElse", fn(*dsv4_)), ChatFormatKind::DeepSeekV4);
  EXPECT_EQ(detect_chat_format("", nullptr), ChatFormatKind::DeepSeekV4);
  EXPECT_STREQ(chat_format_name(ChatFormatKind::Harmony), "harmony");
}

TEST_F(ChatFormatTest, EachFormatIsItsOwnEncoderAndParser) {
  std::vector<ChatMessage> m(2);
  m[0].role = ChatRole::System;
  m[0].content = "Be brief.";
  m[1].content = "Hello there";
  ChatOptions o;
  o.effort = ReasoningEffort::Low;

  const auto harmony = chat_format_for("GptOssForCausalLM", fn(*gptoss_));
  HarmonyOptions ho;
  ho.effort = ReasoningEffort::Low;
  EXPECT_EQ(harmony->encode(m, o), encode_harmony_chat(m, ho, *gptoss_));
  EXPECT_EQ(harmony->stop_tokens(), (std::vector<int32_t>{200002, 200012}));  // <|return|>, <|call|>
  EXPECT_TRUE(harmony->reasons(o));
  const ParsedCompletion pc =
      harmony->parse("<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi!", o);
  EXPECT_EQ(pc.reasoning_content, "hm");
  EXPECT_EQ(pc.content, "Hi!");

  const auto dsv4 = chat_format_for("DeepseekV4ForCausalLM", fn(*dsv4_));
  ChatEncodeOptions eo;
  EXPECT_EQ(dsv4->encode(m, o), dsv4_->encode(encode_dsv4_chat(m, eo)));
  EXPECT_TRUE(dsv4->stop_tokens().empty());
  EXPECT_FALSE(dsv4->reasons(o));
  o.mode = ThinkingMode::Thinking;
  EXPECT_TRUE(dsv4->reasons(o));
  EXPECT_EQ(dsv4->parse("why</think>answer", o).content, "answer");
}

TEST_F(ChatFormatTest, HarmonyNeedsItsTokens) {
  EXPECT_THROW(make_chat_format(ChatFormatKind::Harmony, fn(*dsv4_)), Error);
}

}  // namespace
}  // namespace nibble
