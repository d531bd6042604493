// `nibble serve` end to end, the features past the first slice: thinking
// mode, tools, logprobs, n > 1, /health while loading, latency histograms.
// Oracles: prompts written out by hand from docs/text.md and fed through
// /v1/completions as token ids (the same model, greedy: the same reply if
// and only if the chat encoding gave the same prompt), log-softmax computed
// here from Engine::step's logits, and single-choice requests for n > 1.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "nibble/engine.h"
#include "server_process.h"

namespace nibble::testing {
namespace {

using nlohmann::json;

const std::string kModel = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
const std::string BOS = "<｜begin▁of▁sentence｜>", USER = "<｜User｜>", ASSISTANT = "<｜Assistant｜>";
const std::string THINK = "<think>", END_THINK = "</think>", EOS = "<｜end▁of▁sentence｜>";

class Features : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--parallel", "8"}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static json post(const std::string& path, const json& body, int want = 200) {
    const auto r = http_post(port(), path, body.dump());
    EXPECT_EQ(r.status, want) << body.dump() << " -> " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  static json tokens(const std::string& text) { return post("/tokenize", {{"content", text}})["tokens"]; }
  // The greedy completion of a prompt given as text with special tokens.
  static json complete_ids(const std::string& prompt_text, int max_tokens) {
    return post("/v1/completions", {{"prompt", tokens(prompt_text)}, {"max_tokens", max_tokens}, {"temperature", 0}});
  }
  static ServerProcess* server_;
};
ServerProcess* Features::server_ = nullptr;

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

// What a reply text splits into (text.md: reasoning up to </think>).
std::pair<std::string, std::string> split_thinking(const std::string& text) {
  const size_t p = text.find(END_THINK);
  if (p == std::string::npos) return {text, ""};
  return {text.substr(0, p), text.substr(p + END_THINK.size())};
}

TEST_F(Features, ThinkingPromptAndReasoningContent) {
  const json messages = {{{"role", "system"}, {"content", "S"}}, user("Why is the sky blue?")};
  const std::string expected = BOS + "S" + USER + "Why is the sky blue?" + ASSISTANT + THINK;
  const json ref = complete_ids(expected, 24);
  const auto [reasoning, content] = split_thinking(ref["choices"][0]["text"]);
  for (const json& on : {json{{"chat_template_kwargs", {{"thinking", true}}}}, json{{"reasoning_effort", "high"}},
                         json{{"thinking", {{"type", "enabled"}}}}}) {
    json req = {{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}};
    req.update(on);
    const json r = post("/v1/chat/completions", req);
    EXPECT_EQ(r["usage"]["prompt_tokens"], tokens(expected).size()) << on.dump();
    EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], reasoning) << on.dump();
    EXPECT_EQ(r["choices"][0]["message"]["content"], content) << on.dump();
  }
  // Streamed: the same reasoning as reasoning_content deltas.
  bool done = false;
  const auto events = stream_events(port(), "/v1/chat/completions",
                                    {{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true},
                                     {"chat_template_kwargs", {{"thinking", true}}}},
                                    &done);
  EXPECT_TRUE(done);
  std::string streamed_reasoning, streamed_content;
  for (const auto& e : events) {
    if (e["choices"].empty()) continue;
    const json& d = e["choices"][0]["delta"];
    if (d.contains("reasoning_content")) streamed_reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) streamed_content += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_EQ(streamed_content, content);
  // Off (the default, or said so): the chat-mode prompt, no reasoning field.
  const std::string chat_prompt = BOS + "S" + USER + "Why is the sky blue?" + ASSISTANT + END_THINK;
  for (const json& off : {json::object(), json{{"reasoning_effort", "none"}},
                          json{{"chat_template_kwargs", {{"thinking", false}}}, {"reasoning_effort", "high"}}}) {
    json req = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
    req.update(off);
    const json r = post("/v1/chat/completions", req);
    EXPECT_EQ(r["usage"]["prompt_tokens"], tokens(chat_prompt).size()) << off.dump();
    EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << off.dump();
    EXPECT_EQ(r["choices"][0]["message"]["content"], complete_ids(chat_prompt, 8)["choices"][0]["text"]);
  }
}

TEST_F(Features, ReasoningEffortMaxPrependsDeepSeeksParagraph) {
  const json messages = {user("Hi")};
  const json high = post("/v1/chat/completions",
                         {{"messages", messages}, {"max_tokens", 1}, {"reasoning_effort", "high"}});
  const json max = post("/v1/chat/completions",
                        {{"messages", messages}, {"max_tokens", 1}, {"reasoning_effort", "max"}});
  // DeepSeek's paragraph starts "Reasoning Effort: Absolute maximum with no
  // shortcuts permitted." and follows BOS: more prompt tokens, same start.
  EXPECT_GT(max["usage"]["prompt_tokens"].get<int>(), high["usage"]["prompt_tokens"].get<int>() + 40);
}

// Earlier reasoning goes back into the prompt as DeepSeek's encoding keeps
// it: dropped before the last user turn in plain chat, kept when tools are
// in play (an agent loop's tool-call turns). The reasoning text sits between
// the special tokens <think>..</think>, so it adds exactly its own tokens.
TEST_F(Features, EarlierReasoningIsPassedBackAsDeepSeekExpects) {
  const std::string reasoning = "I will look up the weather in Paris first.";
  const size_t reasoning_tokens = tokens(reasoning).size();
  const json tools = {{{"type", "function"},
                       {"function", {{"name", "get_weather"},
                                     {"description", "Weather of a city"},
                                     {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  auto history = [&](const char* field, bool with_reasoning) {
    json a = {{"role", "assistant"},
              {"content", ""},
              {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                               {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}};
    if (with_reasoning) a[field] = reasoning;
    return json{user("Weather in Paris?"), a, {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}};
  };
  auto prompt_tokens = [&](const json& messages, bool with_tools) {
    json req = {{"messages", messages}, {"max_tokens", 1}, {"chat_template_kwargs", {{"thinking", true}}}};
    if (with_tools) req["tools"] = tools;
    return post("/v1/chat/completions", req)["usage"]["prompt_tokens"].get<size_t>();
  };
  const size_t bare = prompt_tokens(history("reasoning_content", false), true);
  EXPECT_EQ(prompt_tokens(history("reasoning_content", true), true), bare + reasoning_tokens);
  EXPECT_EQ(prompt_tokens(history("reasoning", true), true), bare + reasoning_tokens);  // vLLM's name, accepted
  // Without tools, reasoning before the last user turn is dropped.
  EXPECT_EQ(prompt_tokens(history("reasoning_content", true), false), prompt_tokens(history("reasoning_content", false), false));
}

TEST_F(Features, ToolsReachThePromptAndMarkupNeverLeaks) {
  const json tools = {{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}};
  const json messages = {user("Find it.")};
  const json plain = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}});
  const json with = post("/v1/chat/completions",
                         {{"messages", messages}, {"tools", tools}, {"max_tokens", 4}, {"temperature", 0}});
  // The tools section (DeepSeek's "## Tools" template + the schema) is in the prompt...
  EXPECT_GT(with["usage"]["prompt_tokens"].get<int>(), plain["usage"]["prompt_tokens"].get<int>() + 100);
  // ... and not with tool_choice "none".
  const json none = post("/v1/chat/completions", {{"messages", messages}, {"tools", tools}, {"tool_choice", "none"},
                                                  {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(none["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  // Forced calls: the prompt opens the block; whatever the tiny model writes
  // after it, no markup reaches content, and a call, if any, is well formed.
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "lookup"}}}}}) {
    for (bool stream : {false, true}) {
      json req = {{"messages", messages}, {"tools", tools}, {"tool_choice", choice}, {"max_tokens", 24},
                  {"temperature", 0}, {"stream", stream}};
      std::string content;
      if (stream) {
        for (const auto& e : stream_events(port(), "/v1/chat/completions", req))
          if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
            content += e["choices"][0]["delta"]["content"].get<std::string>();
      } else {
        const json r = post("/v1/chat/completions", req);
        const json& msg = r["choices"][0]["message"];
        if (msg["content"].is_string()) content = msg["content"];
        for (const auto& c : msg.value("tool_calls", json::array())) {
          EXPECT_EQ(c["function"]["name"], "lookup");
          EXPECT_TRUE(json::parse(c["function"]["arguments"].get<std::string>()).is_object());
        }
      }
      EXPECT_EQ(content.find("DSML"), std::string::npos) << content;
    }
  }
}

TEST_F(Features, ToolRequestMistakesAre400) {
  const json tools = {{{"type", "function"}, {"function", {{"name", "lookup"}}}}};
  const json m = {user("x")};
  post("/v1/chat/completions", {{"messages", m}, {"tool_choice", "required"}}, 400);
  post("/v1/chat/completions",
       {{"messages", m}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"tools", tools}, {"tool_choice", "sometimes"}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"tools", {{{"type", "function"}}}}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"tools", tools}, {"tool_choice", "required"},
                                {"chat_template_kwargs", {{"thinking", true}}}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"top_logprobs", 2}}, 400);  // needs logprobs: true
  post("/v1/chat/completions", {{"messages", m}, {"logprobs", true}, {"top_logprobs", 21}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"n", 2}, {"temperature", 0}}, 400);
  post("/v1/chat/completions", {{"messages", m}, {"n", 9}}, 400);  // more than --parallel 8
}

// log-softmax of the raw logits, computed here from the engine itself.
TEST_F(Features, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  const json prompt = post("/tokenize", {{"content", "The king said"}, {"add_special", true}})["tokens"];
  const json r = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0.7}, {"seed", 3},
                                          {"logprobs", 5}});
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, r["choices"][0]["text"]);
  EXPECT_EQ(lp["text_offset"][0], 0);

  // The first token's distribution from Engine::step on the same prompt.
  EngineOptions eo;
  eo.threads = 1;
  auto engine = Engine::load(kModel, eo);
  const std::vector<int32_t> ids = prompt.get<std::vector<int32_t>>();
  const SeqId seq = engine->create();
  StepInput in{seq, ids};
  const auto logits = engine->step(std::span<const StepInput>(&in, 1))[0];
  engine->release(seq);
  double max = logits[0];
  for (float x : logits) max = std::max(max, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  const double lse = max + std::log(sum);
  // The sampled token is known by its text: one of the ids that spell it.
  const std::string first = lp["tokens"][0];
  double closest = 1e9;
  for (int32_t id = 0; id < int32_t(engine->vocab_size()); ++id)
    if (engine->detokenize(std::span<const int32_t>(&id, 1)) == first)
      closest = std::min(closest, std::abs(lp["token_logprobs"][0].get<double>() - (double(logits[size_t(id)]) - lse)));
  EXPECT_LT(closest, 1e-4) << first;
  // The top 5: the 5 largest logits, each log-softmaxed.
  std::vector<double> sorted(logits.begin(), logits.end());
  std::sort(sorted.rbegin(), sorted.rend());
  std::vector<double> top;
  for (const auto& [tok, v] : lp["top_logprobs"][0].items()) top.push_back(v.get<double>());
  std::sort(top.rbegin(), top.rend());
  ASSERT_EQ(top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(top[i], sorted[i] - lse, 1e-4) << i;

  // Chat: OpenAI's shape; greedy picks the most likely token each time.
  const json c = post("/v1/chat/completions", {{"messages", {user("Hello")}}, {"max_tokens", 5}, {"temperature", 0},
                                               {"logprobs", true}, {"top_logprobs", 3}});
  const json& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  std::string text;
  for (const auto& e : content) {
    text += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_FLOAT_EQ(e["top_logprobs"][0]["logprob"].get<float>(), e["logprob"].get<float>());
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_GE(e["top_logprobs"][1]["logprob"].get<double>(), e["top_logprobs"][2]["logprob"].get<double>());
    std::vector<int> bytes;
    for (unsigned char ch : e["token"].get<std::string>()) bytes.push_back(ch);
    EXPECT_EQ(e["bytes"].get<std::vector<int>>(), bytes);
  }
  EXPECT_EQ(text, c["choices"][0]["message"]["content"]);
}

// n choices from one prefill: choice i samples with seed + i, so it is the
// reply a single request with that seed gets.
TEST_F(Features, NChoicesAreTheSingleRequestsWithSuccessiveSeeds) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 1.0}};
  json req = base;
  req["n"] = 3;
  req["seed"] = 40;
  const json r = post("/v1/completions", req);
  ASSERT_EQ(r["choices"].size(), 3u);
  int64_t tokens = 0;
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    json one = base;
    one["seed"] = 40 + i;
    const json s = post("/v1/completions", one);
    EXPECT_EQ(r["choices"][i]["text"], s["choices"][0]["text"]) << i;
    tokens += s["usage"]["completion_tokens"].get<int64_t>();
    distinct.insert(r["choices"][i]["text"].get<std::string>());
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], tokens);
  EXPECT_GT(distinct.size(), 1u);
  // Streamed chat: chunks for each index, each with a role first and a finish.
  bool done = false;
  const auto events = stream_events(port(), "/v1/chat/completions",
                                    {{"messages", {user("Hi")}}, {"max_tokens", 6}, {"n", 2}, {"seed", 1},
                                     {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                                    &done);
  EXPECT_TRUE(done);
  std::map<int, std::vector<json>> by_index;
  for (const auto& e : events)
    for (const auto& c : e["choices"]) by_index[c["index"].get<int>()].push_back(c);
  ASSERT_EQ(by_index.size(), 2u);
  for (auto& [i, chunks] : by_index) {
    EXPECT_EQ(chunks.front()["delta"]["role"], "assistant") << i;
    EXPECT_FALSE(chunks.back()["finish_reason"].is_null()) << i;
  }
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 12);
}

// Penalties, checked against a greedy loop over Engine::step written here:
// repetition_penalty (transformers': divide a positive logit, multiply a
// negative one) over every token of the sequence, each id once; presence /
// frequency (OpenAI's: minus presence if the token was generated, minus
// frequency times its count) over the generated tokens.
TEST_F(Features, PenaltiesMatchAGreedyLoopWrittenHere) {
  const json prompt = post("/tokenize", {{"content", "The king said"}, {"add_special", true}})["tokens"];
  EngineOptions eo;
  eo.threads = 1;
  auto engine = Engine::load(kModel, eo);
  const auto& eos = engine->eos_token_ids();
  auto reference = [&](float repetition, float presence, float frequency, int n) {
    std::vector<int32_t> seen = prompt.get<std::vector<int32_t>>(), generated;
    const SeqId seq = engine->create();
    std::vector<int32_t> feed = seen;
    for (int i = 0; i < n; ++i) {
      StepInput in{seq, feed};
      std::vector<float> l = engine->step(std::span<const StepInput>(&in, 1))[0];
      std::set<int32_t> once(seen.begin(), seen.end());
      for (int32_t t : once) l[size_t(t)] = l[size_t(t)] > 0 ? l[size_t(t)] / repetition : l[size_t(t)] * repetition;
      std::map<int32_t, int> count;
      for (int32_t t : generated) ++count[t];
      for (const auto& [t, c] : count) l[size_t(t)] -= float(c) * frequency + presence;
      const int32_t next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());  // ties: the lowest id
      if (std::find(eos.begin(), eos.end(), int64_t(next)) != eos.end()) break;
      generated.push_back(next);
      seen.push_back(next);
      feed = {next};
    }
    engine->release(seq);
    return engine->detokenize(generated);
  };
  auto served = [&](json extra) {
    json req = {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}};
    req.update(extra);
    return post("/v1/completions", req)["choices"][0]["text"].get<std::string>();
  };
  const std::string plain = served(json::object());
  EXPECT_EQ(plain, reference(1, 0, 0, 16));
  const std::string rep = served({{"repetition_penalty", 1.3}});
  EXPECT_EQ(rep, reference(1.3f, 0, 0, 16));
  EXPECT_NE(rep, plain);  // the tiny model's greedy text repeats itself: the penalty must change it
  EXPECT_EQ(served({{"presence_penalty", 1.5}, {"frequency_penalty", 0.7}}), reference(1, 1.5f, 0.7f, 16));
  EXPECT_EQ(served({{"repetition_penalty", 1.1}, {"presence_penalty", -0.5}, {"frequency_penalty", 2}}),
            reference(1.1f, -0.5f, 2, 16));
}

// Latency histograms in Prometheus' histogram shape.
TEST_F(Features, TtftAndTpotHistograms) {
  for (int i = 0; i < 3; ++i) post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 5}, {"temperature", 0}});
  const std::string m = http_get(port(), "/metrics").body;
  for (const std::string name : {"time_to_first_token_seconds", "time_per_output_token_seconds",
                                 "inter_token_latency_seconds", "e2e_request_latency_seconds"}) {
    const std::string full = "nibble:" + name;
    EXPECT_NE(m.find("# TYPE " + full + " histogram\n"), std::string::npos) << name;
    // Buckets are cumulative and end at +Inf = _count.
    int64_t prev = -1, inf = -1, count = -1;
    size_t at = 0;
    while ((at = m.find(full + "_bucket{le=\"", at)) != std::string::npos) {
      const size_t close = m.find("\"} ", at);
      const std::string le = m.substr(at + full.size() + 12, close - at - full.size() - 12);
      const int64_t v = std::stoll(m.substr(close + 3));
      EXPECT_GE(v, prev) << name;
      prev = v;
      if (le == "+Inf") inf = v;
      at = close;
    }
    const size_t c = m.find(full + "_count ");
    ASSERT_NE(c, std::string::npos) << name;
    count = std::stoll(m.substr(c + full.size() + 7));
    EXPECT_EQ(inf, count) << name;
    EXPECT_GE(count, 3) << name;
  }
}

// The socket opens before the model loads: /health says 503 "loading"
// until it is in, then 200, and never goes back.
TEST(ServeHealth, LoadingThenReady) {
  ServerProcess s;
  const auto& seen = s.health_seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 200);
  for (size_t i = 0; i + 1 < seen.size(); ++i) EXPECT_EQ(seen[i], 503) << "statuses before ready";
  EXPECT_LE(seen.size(), 2u);
  const std::string log = s.log();
  const size_t listening = log.find("listening on"), loaded = log.find("loaded in");
  ASSERT_NE(listening, std::string::npos);
  ASSERT_NE(loaded, std::string::npos);
  EXPECT_LT(listening, loaded);  // the order that makes the 503 possible
  EXPECT_EQ(http_get(s.port(), "/health").status, 200);
}

}  // namespace
}  // namespace nibble::testing
