// DeepSeek-V4 chat encoding and completion parsing. Expected prompts are
// written out by hand from docs/text.md and DeepSeek's encoding rules.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

const std::string BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>";
const std::string USER = "<｜User｜>", ASSISTANT = "<｜Assistant｜>", THINK = "<think>", END_THINK = "</think>";

ChatMessage msg(ChatRole role, std::string content) {
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

ChatMessage reply(std::string content, std::string reasoning) {
  ChatMessage m = msg(ChatRole::Assistant, std::move(content));
  m.reasoning_content = std::move(reasoning);
  return m;
}

ChatMessage tool_result(std::string call_id, std::string content) {
  ChatMessage m = msg(ChatRole::Tool, std::move(content));
  m.tool_call_id = std::move(call_id);
  return m;
}

ChatEncodeOptions thinking() {
  ChatEncodeOptions o;
  o.mode = ThinkingMode::Thinking;
  return o;
}

TEST(ChatDsv4, TextMdChatExample) {
  // docs/text.md, chat mode, verbatim.
  const std::vector<ChatMessage> m = {msg(ChatRole::System, "S"), msg(ChatRole::User, "U1"),
                                      reply("A1", "R1"), msg(ChatRole::User, "U2")};
  EXPECT_EQ(encode_dsv4_chat(m, {}),
            "<｜begin▁of▁sentence｜>S<｜User｜>U1<｜Assistant｜></think>A1<｜end▁of▁sentence｜><｜User｜>U2"
            "<｜Assistant｜></think>");
}

TEST(ChatDsv4, ThinkingModeDropsEarlierReasoning) {
  const std::vector<ChatMessage> m = {msg(ChatRole::System, "S"), msg(ChatRole::User, "U1"),
                                      reply("A1", "R1"), msg(ChatRole::User, "U2")};
  EXPECT_EQ(encode_dsv4_chat(m, thinking()),
            BOS + "S" + USER + "U1" + ASSISTANT + END_THINK + "A1" + EOS + USER + "U2" + ASSISTANT + THINK);
  // Without dropping, history keeps "reasoning</think>" and opens with <think>.
  ChatEncodeOptions keep = thinking();
  keep.drop_thinking = false;
  EXPECT_EQ(encode_dsv4_chat(m, keep),
            BOS + "S" + USER + "U1" + ASSISTANT + THINK + "R1" + END_THINK + "A1" + EOS + USER + "U2" + ASSISTANT +
                THINK);
}

TEST(ChatDsv4, ThinkingModeKeepsReasoningAfterLastUser) {
  const std::vector<ChatMessage> m = {msg(ChatRole::User, "U1"), reply("A1", "R1")};
  EXPECT_EQ(encode_dsv4_chat(m, thinking()), BOS + USER + "U1" + ASSISTANT + THINK + "R1" + END_THINK + "A1" + EOS);
  // No reasoning given: still "</think>" before the content.
  const std::vector<ChatMessage> m2 = {msg(ChatRole::User, "U1"), msg(ChatRole::Assistant, "A1")};
  EXPECT_EQ(encode_dsv4_chat(m2, thinking()), BOS + USER + "U1" + ASSISTANT + THINK + END_THINK + "A1" + EOS);
  // Chat mode never writes reasoning.
  EXPECT_EQ(encode_dsv4_chat(m, {}), BOS + USER + "U1" + ASSISTANT + END_THINK + "A1" + EOS);
}

TEST(ChatDsv4, ConsecutiveUserMessagesFormOneTurn) {
  const std::vector<ChatMessage> m = {msg(ChatRole::User, "a"), msg(ChatRole::User, "b")};
  EXPECT_EQ(encode_dsv4_chat(m, {}), BOS + USER + "a\n\nb" + ASSISTANT + END_THINK);
}

TEST(ChatDsv4, ToolResultsJoinTheNextUserTurnInCallOrder) {
  ChatMessage call = msg(ChatRole::Assistant, "");
  call.tool_calls = {{"a", "f", "{}"}, {"b", "g", "{\"x\": 1}"}};
  const std::vector<ChatMessage> m = {msg(ChatRole::User, "go"), call, tool_result("b", "B"),
                                      tool_result("a", "A"), msg(ChatRole::User, "thanks")};
  const std::string calls =
      "\n\n<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>";
  EXPECT_EQ(encode_dsv4_chat(m, {}), BOS + USER + "go" + ASSISTANT + END_THINK + calls + EOS + USER +
                                         "<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>\n\nthanks" +
                                         ASSISTANT + END_THINK);
}

// The tools section DeepSeek's template writes, with one schema line.
std::string tools_section(const std::string& schemas) {
  return "## Tools\n\n"
         "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
         "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
         "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
         "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
         "...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n"
         "</｜DSML｜tool_calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
         "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n" +
         schemas +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

std::vector<ChatMessage> weather_conversation() {
  ChatMessage sys = msg(ChatRole::System, "You are helpful.");
  sys.tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather, by city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  ChatMessage call = reply("", "Need the tool.");
  call.tool_calls = {{"c1", "get_weather", R"({"city": "Paris", "days": 3, "units": null, "opts": {"a": [1, 2.5, true]}, "q": "\"x\"\n"})"}};
  return {sys, msg(ChatRole::User, "Weather in Paris?"), call, tool_result("c1", "sunny, 21°C")};
}

const std::string kWeatherCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"units\" string=\"false\">null</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"a\": [1, 2.5, true]}</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"q\" string=\"true\">\"x\"\n</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

TEST(ChatDsv4, ToolsKeepReasoningAndRenderSchemasPythonStyle) {
  const std::string schema =
      "{\"name\": \"get_weather\", \"description\": \"Weather, by city\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}";
  const std::string expect = BOS + "You are helpful.\n\n" + tools_section(schema) + USER + "Weather in Paris?" +
                             ASSISTANT + THINK + "Need the tool." + END_THINK + kWeatherCall + EOS + USER +
                             "<tool_result>sunny, 21°C</tool_result>" + ASSISTANT + THINK;
  EXPECT_EQ(encode_dsv4_chat(weather_conversation(), thinking()), expect);
}

TEST(ChatDsv4, ResponseFormatAndDeveloper) {
  ChatMessage sys = msg(ChatRole::System, "S");
  sys.response_format = R"({"type": "json_object", "ü": "é\t"})";
  const std::vector<ChatMessage> m = {sys, msg(ChatRole::Developer, "D"), msg(ChatRole::User, "U"), reply("A", "R"),
                                      msg(ChatRole::User, "U2")};
  const std::string rf =
      "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
      "{\"type\": \"json_object\", \"ü\": \"é\\t\"}";
  // Chat mode keeps the developer turn (a user-style turn with no reply).
  EXPECT_EQ(encode_dsv4_chat(m, {}), BOS + "S" + rf + USER + "D" + USER + "U" + ASSISTANT + END_THINK + "A" + EOS +
                                         USER + "U2" + ASSISTANT + END_THINK);
  // Thinking mode with dropping removes developer turns before the last user.
  EXPECT_EQ(encode_dsv4_chat(m, thinking()), BOS + "S" + rf + USER + "U" + ASSISTANT + END_THINK + "A" + EOS + USER +
                                                 "U2" + ASSISTANT + THINK);
}

TEST(ChatDsv4, ReasoningEffortAndBos) {
  const std::vector<ChatMessage> m = {msg(ChatRole::User, "U")};
  ChatEncodeOptions o = thinking();
  o.effort = ReasoningEffort::Max;
  const std::string max_prefix =
      "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
      "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
      "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
      "scenarios.\n"
      "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
      "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
  EXPECT_EQ(encode_dsv4_chat(m, o), BOS + max_prefix + USER + "U" + ASSISTANT + THINK);
  o.effort = ReasoningEffort::High;
  EXPECT_EQ(encode_dsv4_chat(m, o), BOS + USER + "U" + ASSISTANT + THINK);
  o.mode = ThinkingMode::Chat;
  o.effort = ReasoningEffort::Max;  // only in thinking mode
  o.add_bos = false;
  EXPECT_EQ(encode_dsv4_chat(m, o), USER + "U" + ASSISTANT + END_THINK);
}

TEST(ChatDsv4, InvalidMessagesThrow) {
  EXPECT_THROW(encode_dsv4_chat(std::vector<ChatMessage>{msg(ChatRole::Developer, "")}, {}), Error);
  ChatMessage sys = msg(ChatRole::System, "S");
  sys.tools = "[{\"type\": \"function\"";
  EXPECT_THROW(encode_dsv4_chat(std::vector<ChatMessage>{sys}, {}), Error);
  sys.tools = R"([{"type": "function"}])";  // no "function"
  EXPECT_THROW(encode_dsv4_chat(std::vector<ChatMessage>{sys}, {}), Error);
  ChatMessage call = msg(ChatRole::Assistant, "");
  call.tool_calls = {{"", "f", "[1, 2]"}};  // JSON, but not an object
  EXPECT_THROW(encode_dsv4_chat(std::vector<ChatMessage>{call}, {}), Error);
  // Arguments that are not JSON at all pass through as one string parameter.
  call.tool_calls = {{"", "f", "not json"}};
  EXPECT_EQ(encode_dsv4_chat(std::vector<ChatMessage>{call}, ChatEncodeOptions{.add_bos = false}),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" +
                EOS);
  EXPECT_EQ(parse_chat_role("tool"), ChatRole::Tool);
  EXPECT_THROW(parse_chat_role("function"), Error);
}

TEST(ChatDsv4, PromptEncodesWithSpecialTokens) {
  // The text.md prompt through the DeepSeek-style fixture tokenizer: the ids
  // must be those the tokenizers library gave for the same text, with each
  // marker a single token.
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("dsv4_tokenizer.json"));
  const std::vector<ChatMessage> m = {msg(ChatRole::System, "S"), msg(ChatRole::User, "U1"), reply("A1", ""),
                                      msg(ChatRole::User, "U2")};
  const std::string prompt = encode_dsv4_chat(m, {});
  const auto data = test::read_fixture("dsv4_cases.json");
  bool found = false;
  for (const auto& c : data["cases"]) {
    if (c["text"] != prompt) continue;
    found = true;
    const auto ids = tok.encode(prompt);
    EXPECT_EQ(ids, test::ids_of(c["ids"]));
    EXPECT_EQ(ids.front(), 0);  // BOS
    const int32_t user = *tok.token_id(USER), asst = *tok.token_id(ASSISTANT), end = *tok.token_id(END_THINK);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 2);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), asst), 2);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 2);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // EOS
  }
  EXPECT_TRUE(found) << "fixture lacks the text.md prompt";
}

TEST(ChatDsv4Parse, ThinkingAndChatCompletions) {
  ParsedCompletion p = parse_dsv4_completion("Let me think.</think>The answer is 4." + EOS, ThinkingMode::Thinking);
  EXPECT_EQ(p.reasoning_content, "Let me think.");
  EXPECT_EQ(p.content, "The answer is 4.");
  EXPECT_TRUE(p.finished);
  EXPECT_TRUE(p.tool_calls.empty());
  p = parse_dsv4_completion("Hi!" + EOS, ThinkingMode::Chat);
  EXPECT_EQ(p.content, "Hi!");
  EXPECT_EQ(p.reasoning_content, "");
  p = parse_dsv4_completion(END_THINK + EOS, ThinkingMode::Thinking);
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.finished);
}

TEST(ChatDsv4Parse, ToolCallsRoundTrip) {
  // The assistant part of the rendered weather prompt, as the model would
  // generate it after "<｜Assistant｜><think>".
  const std::string completion = "Need the tool." + END_THINK + kWeatherCall + EOS;
  const ParsedCompletion p = parse_dsv4_completion(completion, ThinkingMode::Thinking);
  EXPECT_EQ(p.reasoning_content, "Need the tool.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments,
            "{\"city\": \"Paris\", \"days\": 3, \"units\": null, \"opts\": {\"a\": [1, 2.5, true]}, "
            "\"q\": \"\\\"x\\\"\\n\"}");
  EXPECT_TRUE(p.finished);
  // Encoding the parsed call again reproduces the same DSML.
  ChatMessage again = reply(p.content, p.reasoning_content);
  again.tool_calls = p.tool_calls;
  const std::vector<ChatMessage> m = {msg(ChatRole::User, "Weather in Paris?"), again};
  EXPECT_EQ(encode_dsv4_chat(m, thinking()), BOS + USER + "Weather in Paris?" + ASSISTANT + THINK + completion);
  // A call without parameters renders as "...name=\"f\">\n\n</｜DSML｜invoke>".
  const ParsedCompletion z = parse_dsv4_completion(
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS,
      ThinkingMode::Chat);
  ASSERT_EQ(z.tool_calls.size(), 1u);
  EXPECT_EQ(z.tool_calls[0].name, "f");
  EXPECT_EQ(z.tool_calls[0].arguments, "{}");
  // A closed block without EOS is accepted, unfinished.
  const ParsedCompletion q = parse_dsv4_completion("x" + kWeatherCall, ThinkingMode::Chat);
  EXPECT_EQ(q.content, "x");
  EXPECT_EQ(q.tool_calls.size(), 1u);
  EXPECT_FALSE(q.finished);
}

TEST(ChatDsv4Parse, TruncatedCompletions) {
  EXPECT_THROW(parse_dsv4_completion("still thinking", ThinkingMode::Thinking), Error);
  ParsedCompletion p = parse_dsv4_completion("still thinking", ThinkingMode::Thinking, /*require_end=*/false);
  EXPECT_EQ(p.reasoning_content, "still thinking");
  EXPECT_FALSE(p.finished);
  EXPECT_THROW(parse_dsv4_completion("no end", ThinkingMode::Chat), Error);
  p = parse_dsv4_completion("no end", ThinkingMode::Chat, false);
  EXPECT_EQ(p.content, "no end");
  EXPECT_FALSE(p.finished);
  const std::string partial = "ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜param";
  EXPECT_THROW(parse_dsv4_completion(partial, ThinkingMode::Chat), Error);
  p = parse_dsv4_completion(partial, ThinkingMode::Chat, false);
  EXPECT_EQ(p.content, partial);  // nothing lost
  EXPECT_TRUE(p.tool_calls.empty());
  // One complete call, then cut off in the second: all of it stays text.
  const std::string one = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n<｜DSML｜inv";
  p = parse_dsv4_completion(one, ThinkingMode::Chat, false);
  EXPECT_EQ(p.content, one);
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ChatDsv4Parse, MalformedCompletionsThrow) {
  const ThinkingMode chat = ThinkingMode::Chat;
  EXPECT_THROW(parse_dsv4_completion("a" + EOS + "b", chat), Error);                       // text after EOS
  EXPECT_THROW(parse_dsv4_completion("a<think>b" + EOS, chat), Error);                     // special in content
  EXPECT_THROW(parse_dsv4_completion("r</think>a</think>" + EOS, ThinkingMode::Thinking), Error);
  const std::string head = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const std::string p1 = "<｜DSML｜parameter name=\"k\" string=\"true\">v</｜DSML｜parameter>\n";
  const std::string tail = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;
  EXPECT_NO_THROW(parse_dsv4_completion(head + p1 + tail, chat));
  EXPECT_THROW(parse_dsv4_completion(head + p1 + p1 + tail, chat), Error);  // duplicate parameter
  EXPECT_THROW(parse_dsv4_completion(head + "<｜DSML｜parameter name=\"k\" string=\"maybe\">v</｜DSML｜parameter>\n" +
                                         tail,
                                     chat),
               Error);
  EXPECT_THROW(parse_dsv4_completion(head + p1 + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>junk" + EOS, chat), Error);
  EXPECT_THROW(parse_dsv4_completion("\n\n<｜DSML｜tool_calls> \n" + tail, chat), Error);  // bad gap
  EXPECT_THROW(parse_dsv4_completion("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n" + tail, chat), Error);
  // Invalid UTF-8 inside a string parameter cannot become JSON.
  EXPECT_THROW(parse_dsv4_completion(head + "<｜DSML｜parameter name=\"k\" string=\"true\">\xC3</｜DSML｜parameter>\n" +
                                         tail,
                                     chat),
               Error);
}

}  // namespace
}  // namespace nibble
