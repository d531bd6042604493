// DeepSeek-V3's chat format against its published chat template: the
// prompts of dsv3_chat_cases.json were rendered by jinja2 (transformers'
// settings) from the template of DeepSeek-V3's tokenizer_config.json and
// tokenized by `tokenizers` with a V3-pipeline tokenizer
// (tools/gen_dsv3_tok_fixtures.py); nibble's encoder must give the same
// text and ids, the template's never-reset state included. Then the reply
// parser on calls written as the template writes them.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/chat_dsv3.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using nlohmann::json;

std::vector<ChatMessage> messages_of(const json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv["messages"]) {
    ChatMessage c;
    c.role = parse_chat_role(m["role"].get<std::string>());
    c.content = m["content"].is_string() ? m["content"].get<std::string>() : "";
    c.tool_call_id = m.value("tool_call_id", "");
    for (const auto& t : m.value("tool_calls", json::array()))
      c.tool_calls.push_back({t["id"], t["function"]["name"], t["function"]["arguments"]});
    out.push_back(std::move(c));
  }
  return out;
}

TEST(Dsv3Chat, PromptsMatchThePublishedTemplate) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("dsv3_tokenizer.json"));
  const json data = test::read_fixture("dsv3_chat_cases.json");
  ASSERT_EQ(data["conversations"].size(), 8u);
  for (const auto& conv : data["conversations"]) {
    const std::string text = encode_dsv3_chat(messages_of(conv));
    EXPECT_EQ(text, conv["prompt"].get<std::string>()) << conv["name"];
    EXPECT_EQ(tok.encode(text), test::ids_of(conv["ids"])) << conv["name"];
  }
  auto tokenize = [&tok](const std::string& s, bool special) { return tok.encode(s, special); };
  EXPECT_EQ(detect_chat_format("DeepseekV3ForCausalLM", tokenize), ChatFormatKind::DeepSeekV3);
  EXPECT_EQ(detect_chat_format("", tokenize), ChatFormatKind::DeepSeekV4);
  const auto f = chat_format_for("DeepseekV3ForCausalLM", tokenize);
  EXPECT_STREQ(f->name(), "deepseek-v3");
  const auto& conv = data["conversations"][5];
  EXPECT_EQ(f->encode(messages_of(conv), {}), test::ids_of(conv["ids"]));
  EXPECT_TRUE(f->stop_tokens().empty());
}

TEST(Dsv3Reply, ContentAndCalls) {
  ParsedCompletion pc = parse_dsv3_completion("Sunny, 21°C.<｜end▁of▁sentence｜>");
  EXPECT_EQ(pc.content, "Sunny, 21°C.");
  EXPECT_TRUE(pc.finished);
  pc = parse_dsv3_completion(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
  EXPECT_EQ(pc.content, "");
  ASSERT_EQ(pc.tool_calls.size(), 2u);
  EXPECT_EQ(pc.tool_calls[0].name, "get_weather");
  EXPECT_EQ(pc.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(pc.tool_calls[1].name, "get_time");
  EXPECT_EQ(pc.tool_calls[1].arguments, "{}");
  // Cut off inside the second call: the first is kept.
  pc = parse_dsv3_completion(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{\"a",
      false);
  ASSERT_EQ(pc.tool_calls.size(), 1u);
  EXPECT_FALSE(pc.finished);
  EXPECT_THROW(parse_dsv3_completion("no end"), Error);
  EXPECT_THROW(parse_dsv3_completion("<｜tool▁calls▁begin｜>junk<｜end▁of▁sentence｜>"), Error);
  EXPECT_THROW(parse_dsv3_completion("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f {}"
                                     "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"),
               Error);
}

}  // namespace
}  // namespace nibble
