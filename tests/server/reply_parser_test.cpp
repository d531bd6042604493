// ReplyParser (reasoning / content / DSML tool calls) and ChoiceBuilder.
// Oracles: the tokenizer layer's parse_dsv4_completion (a separate,
// whole-text parser written from DeepSeek's encoding_dsv4.py) for valid
// replies, and invariants for broken ones. Streams are cut at every byte,
// at random, and at the real tokenizer's token boundaries.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "server/choice_builder.h"
#include "server/reply_parser.h"
#include "server/text_stream.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/tokenizer.h"

namespace nibble::server {
namespace {

using nlohmann::json;

const std::string kDsml = "｜DSML｜";
const std::string kEos = "<｜end▁of▁sentence｜>";

struct Result {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

Result collect(ReplyParser& p, const std::vector<std::string>& pieces) {
  Result r;
  auto take = [&](ReplyDelta d) {
    r.reasoning += d.reasoning;
    r.content += d.content;
    for (auto& c : d.tool_calls) r.calls.push_back(std::move(c));
  };
  for (const auto& s : pieces) take(p.push(s));
  take(p.finish());
  return r;
}

Result parse_pieces(const std::vector<std::string>& pieces, ReplyParser::Start start = ReplyParser::Start::Content,
                    const std::string& forced = "") {
  ReplyParser p(start, forced);
  return collect(p, pieces);
}

// `text` cut at the given byte offsets.
std::vector<std::string> cut(const std::string& text, std::vector<size_t> at) {
  std::sort(at.begin(), at.end());
  std::vector<std::string> out;
  size_t prev = 0;
  for (size_t a : at) {
    out.push_back(text.substr(prev, a - prev));
    prev = a;
  }
  out.push_back(text.substr(prev));
  return out;
}

std::string call_block(const std::vector<std::pair<std::string, std::vector<std::tuple<std::string, std::string, bool>>>>& calls) {
  std::string s = "<" + kDsml + "tool_calls>\n";
  for (const auto& [name, params] : calls) {
    s += "<" + kDsml + "invoke name=\"" + name + "\">\n";
    for (const auto& [k, v, is_string] : params)
      s += "<" + kDsml + "parameter name=\"" + k + "\" string=\"" + (is_string ? "true" : "false") + "\">" + v + "</" +
           kDsml + "parameter>\n";
    s += "</" + kDsml + "invoke>\n";
  }
  s += "</" + kDsml + "tool_calls>";
  return s;
}

const std::string kWeatherReply =
    "Let me check both cities." + std::string("\n\n") +
    call_block({{"get_weather", {{"city", "Paris", true}, {"days", "3", false}, {"units", "{\"temp\": \"C\", \"wind\": [1, 2]}", false}}},
                {"get_time", {{"zone", "Europe/Paris <CET>", true}}}});

void expect_same(const Result& a, const Result& b, const std::string& where) {
  EXPECT_EQ(a.reasoning, b.reasoning) << where;
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
    EXPECT_EQ(a.calls[i].index, i) << where;
  }
}

// Against the tokenizer layer's whole-text parser: the same content,
// reasoning, call names, and arguments that are the same JSON.
void expect_matches_oracle(const std::string& text, ThinkingMode mode) {
  const ParsedCompletion want = parse_dsv4_completion(text + kEos, mode);
  const Result got =
      parse_pieces({text}, mode == ThinkingMode::Thinking ? ReplyParser::Start::Reasoning : ReplyParser::Start::Content);
  EXPECT_EQ(got.reasoning, want.reasoning_content);
  EXPECT_EQ(got.content, want.content);
  ASSERT_EQ(got.calls.size(), want.tool_calls.size());
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.tool_calls[i].name);
    EXPECT_EQ(json::parse(got.calls[i].arguments), json::parse(want.tool_calls[i].arguments));
  }
}

TEST(ReplyParser, PlainContentPassesThrough) {
  const Result r = parse_pieces({"Hello, ", "world <b>not markup</b> | ｜ \n\n"});
  EXPECT_EQ(r.content, "Hello, world <b>not markup</b> | ｜ \n\n");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ReplyParser, ReasoningThenContent) {
  const Result r = parse_pieces({"I should greet.</think>Hi there"}, ReplyParser::Start::Reasoning);
  EXPECT_EQ(r.reasoning, "I should greet.");
  EXPECT_EQ(r.content, "Hi there");
  expect_matches_oracle("I should greet.</think>Hi there", ThinkingMode::Thinking);
}

TEST(ReplyParser, ReasoningCutOffStaysReasoning) {
  const Result r = parse_pieces({"still thinking </thi"}, ReplyParser::Start::Reasoning);
  EXPECT_EQ(r.reasoning, "still thinking </thi");
  EXPECT_EQ(r.content, "");
}

TEST(ReplyParser, ToolCallsMatchTheWholeTextParser) {
  expect_matches_oracle(kWeatherReply, ThinkingMode::Chat);
  expect_matches_oracle("Thinking about tools.</think>" + kWeatherReply, ThinkingMode::Thinking);
  expect_matches_oracle("\n\n" + call_block({{"noargs", {}}}), ThinkingMode::Chat);
  const Result r = parse_pieces({kWeatherReply});
  EXPECT_EQ(r.content, "Let me check both cities.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments),
            json({{"city", "Paris"}, {"days", 3}, {"units", {{"temp", "C"}, {"wind", {1, 2}}}}}));
  EXPECT_EQ(json::parse(r.calls[1].arguments), json({{"zone", "Europe/Paris <CET>"}}));
}

TEST(ReplyParser, NonJsonValueMarkedNotStringBecomesAString) {
  const Result r = parse_pieces({"\n\n" + call_block({{"f", {{"x", "not json", false}}}})});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"x", "not json"}}));
}

TEST(ReplyParser, EverySplitPointGivesTheSameResult) {
  const std::string text = "Reasoning here.</think>" + kWeatherReply;
  const Result whole = parse_pieces({text}, ReplyParser::Start::Reasoning);
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_same(parse_pieces(cut(text, {i}), ReplyParser::Start::Reasoning), whole, "split at " + std::to_string(i));
    for (size_t j = i; j <= text.size() && j < i + 24; ++j)
      expect_same(parse_pieces(cut(text, {i, j}), ReplyParser::Start::Reasoning), whole,
                  "split at " + std::to_string(i) + "," + std::to_string(j));
  }
}

TEST(ReplyParser, ForcedStarts) {
  // tool_choice "required": the prompt ended "<｜DSML｜tool_calls>\n".
  const std::string required = "<" + kDsml + "invoke name=\"f\">\n<" + kDsml +
                               "parameter name=\"a\" string=\"false\">[1]</" + kDsml + "parameter>\n</" + kDsml +
                               "invoke>\n</" + kDsml + "tool_calls>";
  Result r = parse_pieces({required}, ReplyParser::Start::InToolCalls);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json({{"a", {1}}}));
  EXPECT_EQ(r.content, "");
  // A named tool_choice: the prompt already opened the invoke.
  r = parse_pieces({required.substr(required.find('\n') + 1)}, ReplyParser::Start::InInvoke, "g");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "g");
}

TEST(ReplyParser, BrokenMarkupIsDroppedNotShown) {
  // Bad tag, bad flag, other markup inside a value, a bare DSML token, text cut mid-block.
  for (const std::string& tail :
       {"<" + kDsml + "tool_calls>\n<" + kDsml + "bogus>", "<" + kDsml + "tool_calls>\n<" + kDsml +
                                                               "invoke name=\"f\">\n<" + kDsml +
                                                               "parameter name=\"a\" string=\"maybe\">1</" + kDsml +
                                                               "parameter>",
        "<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"f\">\n<" + kDsml +
            "parameter name=\"a\" string=\"true\">x<" + kDsml + "invoke",
        kDsml + " stray", "<" + kDsml + "tool_calls>\n<" + kDsml + "invoke name=\"f"}) {
    const Result r = parse_pieces({"Before.\n\n" + tail});
    EXPECT_EQ(r.content, "Before.") << tail;
    EXPECT_TRUE(r.calls.empty()) << tail;
  }
  // Calls completed before the break are kept.
  const std::string good = call_block({{"f", {{"a", "1", false}}}});
  const std::string broken = good.substr(0, good.rfind("</")) + "<" + kDsml + "invoke name=\"g\">\n<" + kDsml + "junk";
  const Result r = parse_pieces({"\n\n" + broken});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
}

// Random splits of valid and mutated markup: never a crash, never "｜DSML｜"
// in content or reasoning, arguments always a JSON object, and a valid
// text's result independent of the split.
TEST(ReplyParser, FuzzRandomSplitsAndMutations) {
  std::mt19937 rng(1234);
  const std::vector<std::string> valid = {
      kWeatherReply, "Thinking.</think>" + kWeatherReply, "Just text, no calls.",
      "a\n\n" + call_block({{"x", {{"k", "v\n<with> \"quotes\"", true}}}}) + "trailing junk",
      "\n\n" + call_block({{"a", {}}, {"b", {{"n", "-1.5e3", false}}}})};
  const std::string alphabet[] = {"<", ">", "/", "\"", "\n", " ", "=", kDsml, "invoke", "parameter", "tool_calls",
                                  "</think>", "string=\"true\"", "name=\"", "x", "{", "}"};
  auto random_cuts = [&](const std::string& text) {
    std::vector<size_t> at;
    const int n = int(rng() % 12);
    for (int i = 0; i < n; ++i) at.push_back(text.empty() ? 0 : rng() % (text.size() + 1));
    return cut(text, at);
  };
  for (int iter = 0; iter < 4000; ++iter) {
    const std::string& base = valid[rng() % valid.size()];
    const auto start = rng() % 2 ? ReplyParser::Start::Reasoning : ReplyParser::Start::Content;
    std::string text = base;
    const bool mutate = iter % 2 == 1;
    if (mutate) {
      const int edits = 1 + int(rng() % 4);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        const size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text.erase(at, 1 + rng() % 8); break;
          case 1: text.insert(at, alphabet[rng() % std::size(alphabet)]); break;
          default: text.resize(at); break;
        }
      }
    }
    const Result r = parse_pieces(random_cuts(text), start);
    EXPECT_EQ(r.content.find(kDsml), std::string::npos) << text;
    EXPECT_EQ(r.reasoning.find(kDsml), std::string::npos) << text;
    for (const auto& c : r.calls) {
      const json args = json::parse(c.arguments, nullptr, false);
      EXPECT_TRUE(args.is_object()) << c.arguments;
      EXPECT_FALSE(c.name.empty());
    }
    if (!mutate) expect_same(r, parse_pieces({text}, start), text);
  }
}

// ---- ChoiceBuilder over real token streams ---------------------------------

class RealTokens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::from_file(std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny/tokenizer.json"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  // The updates a job would publish for `text`: tokenized by the shipped
  // tokenizer, detokenized incrementally by TextStream, one update per token.
  static std::vector<JobUpdate> updates(const std::string& text) {
    const auto ids = tok_->encode(text, /*allow_special=*/true);
    TextStream ts([](std::span<const int32_t> s) { return tok_->decode(s); }, {});
    std::vector<JobUpdate> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      JobUpdate u;
      u.text = ts.push(ids[i]);
      u.completion_tokens = int64_t(i + 1);
      out.push_back(u);
    }
    JobUpdate last;
    last.text = ts.flush();
    last.completion_tokens = int64_t(ids.size());
    last.done = true;
    last.finish_reason = "stop";
    out.push_back(last);
    return out;
  }
  static TokenText token_text() {
    return [](int32_t t) { return tok_->decode(std::span<const int32_t>(&t, 1)); };
  }
  static Tokenizer* tok_;
};
Tokenizer* RealTokens::tok_ = nullptr;

TEST_F(RealTokens, MarkersAreSplitAcrossTokens) {
  // The DSML marker is one token, but "<", "tool", "_calls", ">" are others:
  // the markup really arrives in pieces.
  const auto ids = tok_->encode(kWeatherReply, true);
  EXPECT_GT(ids.size(), 40u);
  size_t dsml_tokens = 0;
  for (int32_t id : ids) dsml_tokens += tok_->decode(std::span<const int32_t>(&id, 1)) == kDsml;
  EXPECT_EQ(dsml_tokens, 14u);  // 2 + 2 invokes x 2 + 3 params x 2
}

TEST_F(RealTokens, StreamedToolCallsAsOpenAIStreamsThem) {
  ChoiceOptions o;
  o.call_id_prefix = "call_x_";
  ChoiceBuilder b(0, o, token_text());
  std::string content;
  std::vector<json> calls;
  std::string finish;
  bool role_first = false;
  size_t chunk_no = 0;
  for (const auto& u : updates(kWeatherReply)) {
    for (const json& c : b.stream(u)) {
      if (chunk_no++ == 0) role_first = c["delta"].value("role", "") == "assistant";
      else EXPECT_FALSE(c["delta"].contains("role"));
      if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
      if (c["delta"].contains("tool_calls"))
        for (const auto& t : c["delta"]["tool_calls"]) calls.push_back(t);
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  EXPECT_TRUE(role_first);
  EXPECT_EQ(content, "Let me check both cities.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["id"], "call_x_0");
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>())["days"], 3);
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(finish, "tool_calls");
}

// Once the block has closed (or broken) nothing more can be shown: the
// builder says the job may stop, and not before.
TEST_F(RealTokens, WantsStopOnceTheBlockEnds) {
  for (const auto& [text, stop_after] : std::vector<std::pair<std::string, bool>>{
           {kWeatherReply, true}, {"Just words, no markup at all.", false},
           {"Words.\n\n<" + kDsml + "tool_calls>\n<" + kDsml + "nonsense", true}}) {
    ChoiceBuilder b(0, ChoiceOptions{}, token_text());
    auto ups = updates(text);
    ups.pop_back();  // not the end of the job
    bool early = false;
    for (size_t i = 0; i < ups.size(); ++i) {
      b.stream(ups[i]);
      if (b.wants_stop() && i + 1 < ups.size()) early = true;
    }
    if (text == kWeatherReply) {
      EXPECT_FALSE(early);  // not before the token that closes the block
    }
    EXPECT_EQ(b.wants_stop(), stop_after) << text;
  }
}

TEST_F(RealTokens, WholeMessageWithReasoningAndToolCalls) {
  ChoiceOptions o;
  o.thinking = true;
  ChoiceBuilder b(0, o, token_text());
  for (const auto& u : updates("Need the weather.</think>" + kWeatherReply)) b.add(u);
  const json c = b.whole();
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["reasoning_content"], "Need the weather.");
  EXPECT_EQ(c["message"]["content"], "Let me check both cities.");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(c["message"]["tool_calls"][1]["function"]["arguments"], "{\"zone\": \"Europe/Paris <CET>\"}");
}

// Logprob `bytes` are the token's raw bytes: "毕老" is six tokens of one
// byte each (byte-level BPE cut inside both characters), whose texts are all
// U+FFFD, but whose bytes put together are the two characters' UTF-8.
TEST_F(RealTokens, LogprobBytesAreTheTokensRawBytes) {
  const std::string text = "毕老";
  const auto ids = tok_->encode(text, true);
  ASSERT_EQ(ids.size(), 6u);
  ChoiceOptions o;
  o.chat = true;
  o.logprobs = true;
  ChoiceBuilder b(0, o, token_text(), [](int32_t t) { return tok_->token_bytes(t); });
  JobUpdate u;
  u.text = text;
  u.completion_tokens = int64_t(ids.size());
  for (int32_t id : ids) u.logprobs.push_back({id, -0.5f, {{id, -0.5f}, {ids[0], -1.0f}}});
  u.done = true;
  u.finish_reason = "stop";
  b.add(u);
  const json c = b.whole();
  const json& entries = c["logprobs"]["content"];
  ASSERT_EQ(entries.size(), ids.size());
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(entries[i]["token"], "\xEF\xBF\xBD") << i;  // the text cannot show a partial character
    for (const auto& byte : entries[i]["bytes"]) joined += char(byte.get<int>());
    // The top candidates' bytes are theirs too.
    EXPECT_EQ(entries[i]["top_logprobs"][1]["bytes"], json::array({int(uint8_t(tok_->token_bytes(ids[0])[0]))}));
  }
  EXPECT_EQ(joined, text);
  // Without the bytes callback, the old way: the bytes of the text (U+FFFD's three).
  ChoiceBuilder t(0, o, token_text());
  t.add(u);
  EXPECT_EQ(t.whole()["logprobs"]["content"][0]["bytes"], json::array({0xEF, 0xBF, 0xBD}));
}

TEST_F(RealTokens, ToolChoiceNoneAndSerialCallsAndNamed) {
  ChoiceOptions none;
  none.tool_choice = ToolChoice::None;
  ChoiceBuilder b(0, none, token_text());
  for (const auto& u : updates(kWeatherReply)) b.add(u);
  json c = b.whole();
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
  EXPECT_EQ(c["message"]["content"], "Let me check both cities.");  // the markup still never shows

  ChoiceOptions serial;
  serial.parallel_tool_calls = false;
  ChoiceBuilder s(0, serial, token_text());
  for (const auto& u : updates(kWeatherReply)) s.add(u);
  c = s.whole();
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");

  ChoiceOptions named;
  named.tool_choice = ToolChoice::Named;
  named.start = ReplyParser::Start::InInvoke;
  named.forced_name = "get_time";
  ChoiceBuilder n(0, named, token_text());
  const std::string rest = "<" + kDsml + "parameter name=\"zone\" string=\"true\">UTC</" + kDsml + "parameter>\n</" +
                           kDsml + "invoke>\n</" + kDsml + "tool_calls>";
  for (const auto& u : updates(rest)) n.add(u);
  c = n.whole();
  EXPECT_EQ(c["finish_reason"], "stop");  // OpenAI: a named tool_choice finishes "stop"
  EXPECT_TRUE(c["message"]["content"].is_null());
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(json::parse(c["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"zone", "UTC"}}));
}

}  // namespace
}  // namespace nibble::server
