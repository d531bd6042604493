// The request parser on good, bad and hostile bodies: every refusal is an
// ApiError with a 4xx status naming the field; nothing else ever escapes.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/api_error.h"
#include "server/request.h"

namespace nibble::server {
namespace {

constexpr int64_t kVocab = 4096;

// The status a completion body gets: 0 = accepted.
int completion_status(const std::string& body) {
  try {
    parse_completion_request(body, kVocab);
    return 0;
  } catch (const ApiError& e) {
    return e.status;
  }
}

int chat_status(const std::string& body) {
  try {
    parse_chat_request(body);
    return 0;
  } catch (const ApiError& e) {
    return e.status;
  }
}

std::string param_of(const std::string& body) {
  try {
    parse_completion_request(body, kVocab);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "(accepted)";
}

TEST(RequestParser, ReadsACompletion) {
  const auto r = parse_completion_request(
      R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0,"top_p":0.5,"top_k":-1,"min_p":0.1,
          "seed":42,"stop":["a","bc"],"stream":true,"stream_options":{"include_usage":true},"n":1})",
      kVocab);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens.value(), 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream && r.include_usage);
}

TEST(RequestParser, ReadsTokenPromptsAndMaxCompletionTokens) {
  const auto r = parse_completion_request(R"({"prompt":[0,5,4095],"max_tokens":3,"max_completion_tokens":9})", kVocab);
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{0, 5, 4095}));
  EXPECT_EQ(r.max_tokens.value(), 9);
  EXPECT_EQ(parse_completion_request(R"({"prompt":[[1,2]]})", kVocab).prompt_ids.size(), 2u);
}

TEST(RequestParser, ReadsAChat) {
  const auto r = parse_chat_request(
      R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
          {"role":"assistant","content":"x","reasoning_content":"r"},{"role":"user","content":"y","name":"me"}],
          "max_completion_tokens":4,"chat_template_kwargs":{"thinking":false}})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].reasoning_content.value(), "r");
  EXPECT_EQ(r.max_tokens.value(), 4);
}

TEST(RequestParser, ReadsThinkingToolsLogprobsAndChoices) {
  GenerationRequest r = parse_chat_request(
      R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":4,"n":3,)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","b":1,"a":2}}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false})");
  EXPECT_FALSE(r.thinking);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tool_choice_name, "f");
  EXPECT_FALSE(r.parallel_tool_calls);
  // The schema keeps the client's key order ("b" before "a"), as DeepSeek's encoder writes it.
  EXPECT_EQ(r.tools, R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","b":1,"a":2}}}])");
  // An explicit chat_template_kwargs.thinking wins over reasoning_effort.
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high",)"
                         R"("chat_template_kwargs":{"thinking":false}})");
  EXPECT_FALSE(r.thinking);
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"})");
  EXPECT_TRUE(r.thinking);
  EXPECT_EQ(r.effort, ReasoningEffort::Max);
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}})");
  EXPECT_TRUE(r.thinking);
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_FALSE(r.thinking);  // off unless asked for
  r = parse_completion_request(R"({"prompt":"x","logprobs":0})", 100);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
}

TEST(RequestParser, RefusesEachMistakeNamingTheField) {
  EXPECT_EQ(param_of(R"({"prompt":"x","bogus":1})"), "bogus");
  EXPECT_EQ(param_of(R"({"prompt":"x","max_tokens":0})"), "max_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"x","max_tokens":1.5})"), "max_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"x","max_tokens":"3"})"), "max_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"x","temperature":-1})"), "temperature");
  EXPECT_EQ(completion_status(R"({"prompt":"x","temperature":1e400})"), 400);
  EXPECT_EQ(param_of(R"({"prompt":"x","top_p":0})"), "top_p");
  EXPECT_EQ(param_of(R"({"prompt":"x","top_p":1.5})"), "top_p");
  EXPECT_EQ(param_of(R"({"prompt":"x","stop":[1]})"), "stop[]");
  EXPECT_EQ(param_of(R"({"prompt":"x","stop":["a","b","c","d","e"]})"), "stop");
  EXPECT_EQ(param_of(R"({"prompt":"x","stop":""})"), "stop");
  EXPECT_EQ(param_of(R"({"prompt":"x","stream":"yes"})"), "stream");
  EXPECT_EQ(param_of(R"({"prompt":"x","stream_options":{"include_usage":true}})"), "stream_options");
  EXPECT_EQ(param_of(R"({"prompt":"x","n":2,"temperature":0})"), "n");  // greedy choices would be equal
  EXPECT_EQ(param_of(R"({"prompt":"x","n":17})"), "n");
  EXPECT_EQ(param_of(R"({"prompt":"x","logprobs":21})"), "logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","logprobs":true})"), "logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","presence_penalty":2.5})"), "presence_penalty");
  EXPECT_EQ(param_of(R"({"prompt":"x","frequency_penalty":"high"})"), "frequency_penalty");
  EXPECT_EQ(param_of(R"({"prompt":"x","repetition_penalty":0})"), "repetition_penalty");
  EXPECT_EQ(param_of(R"({"prompt":"x","repetition_penalty":-1})"), "repetition_penalty");
  EXPECT_EQ(param_of(R"({"prompt":[1,4096]})"), "prompt[1]");
  EXPECT_EQ(param_of(R"({"prompt":[1,-1]})"), "prompt[1]");
  EXPECT_EQ(param_of(R"({"prompt":["a","b"]})"), "prompt");
  EXPECT_EQ(param_of(R"({"prompt":""})"), "prompt");
  EXPECT_EQ(param_of(R"({"max_tokens":3})"), "prompt");
  EXPECT_EQ(param_of(R"({"prompt":"x","seed":18446744073709551616})"), "seed");  // past uint64: a float
  EXPECT_EQ(param_of(R"({"prompt":"x","max_tokens":99999999999999999999999})"), "max_tokens");
  EXPECT_EQ(chat_status(R"({"messages":[]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"robot","content":"x"}]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"content":"x"}]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":5}]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x","extra":1}]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"thinking":{"type":"on"}})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"thinking":1}})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"other":1}})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":1})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":[{"role":"user","content":"x"}],"logprobs":1})"), 400);
  EXPECT_EQ(chat_status(R"({"messages":"hi"})"), 400);
}

TEST(RequestParser, RefusesMalformedBodies) {
  for (const char* body : {"", "null", "[]", "42", "\"x\"", "{", "{\"prompt\":\"x\"", "{\"prompt\":\"x\"}}",
                           "{\"prompt\":\"\xff\xfe\"}", "{\"prompt\":\"\xc3\"}", "{\"prompt\":\"\\ud800\"}",
                           "{'prompt':'x'}", "{\"prompt\":\"x\",}", "{\"prompt\":NaN}"}) {
    EXPECT_EQ(completion_status(body), 400) << body;
  }
  // Deep nesting is refused before parsing.
  std::string deep = "{\"prompt\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(completion_status(deep), 400);
  std::string deep_chat = "{\"messages\":" + std::string(5000, '[') + "}";
  EXPECT_EQ(chat_status(deep_chat), 400);
}

// Random bytes, and valid bodies with random bytes changed, inserted or cut:
// each is accepted or refused with a 4xx; any other exception fails the test.
TEST(RequestParser, FuzzedBodiesAreAlwaysA4xxOrAccepted) {
  const std::vector<std::string> seeds = {
      R"({"prompt":"hello","max_tokens":5,"temperature":0.7,"stop":["\n"],"stream":true,"stream_options":{"include_usage":true}})",
      R"({"prompt":[1,2,3],"seed":-5,"top_k":40,"top_p":0.9,"min_p":0.05,"n":1,"logprobs":null})",
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}],"max_completion_tokens":3})",
  };
  const std::string alphabet = "{}[]\":,0123456789.eE+-truefalsnul\\u \xff\xc3\x80\x00";
  std::mt19937_64 rng(1234);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body;
    if (i % 5 == 0) {
      const size_t n = rng() % 64;
      for (size_t k = 0; k < n; ++k) body += alphabet[rng() % alphabet.size()];
    } else {
      body = seeds[rng() % seeds.size()];
      const int edits = 1 + int(rng() % 4);
      for (int e = 0; e < edits && !body.empty(); ++e) {
        const size_t at = rng() % body.size();
        switch (rng() % 4) {
          case 0: body[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: body.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 2: body.erase(at, 1 + rng() % 8); break;
          default: body.insert(at, "99999999999999999999999999"); break;
        }
      }
    }
    for (bool chat : {false, true}) {
      try {
        if (chat) parse_chat_request(body);
        else parse_completion_request(body, kVocab);
        ++accepted;
      } catch (const ApiError& e) {
        ASSERT_GE(e.status, 400) << body;
        ASSERT_LT(e.status, 500) << body;
        ++refused;
      } catch (const std::exception& e) {
        FAIL() << "not an ApiError (" << e.what() << ") for body: " << body;
      }
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

TEST(RequestParser, TokenizeAndDetokenize) {
  EXPECT_EQ(parse_tokenize_request(R"({"content":"a b","add_special":true})").content, "a b");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2]})", kVocab).tokens.size(), 2u);
  EXPECT_THROW(parse_tokenize_request(R"({"text":"a"})"), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":[9999]})", kVocab), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":"1"})", kVocab), ApiError);
}

}  // namespace
}  // namespace nibble::server
