// Request parsing: depth check, JSON parse (nlohmann's lexer also rejects
// ill-formed UTF-8 in strings), then field by field against a fixed list.
#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nibble::server {
namespace {

using nlohmann::json;

// Nesting depth of a JSON text, strings skipped; stops counting past the limit.
void check_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) bad_request("", "the request body nests deeper than ", kMaxJsonDepth, " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parse_object(std::string_view body) {
  check_depth(body);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_request("", "the request body is not valid JSON (UTF-8)");
  if (!j.is_object()) bad_request("", "the request body must be a JSON object");
  return j;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

std::string as_string(const json& v, const std::string& name) {
  if (!v.is_string()) bad_request(name, name, " must be a string, got ", type_name(v));
  return v.get<std::string>();
}

bool as_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad_request(name, name, " must be a boolean, got ", type_name(v));
  return v.get<bool>();
}

// A finite number in [lo, hi].
double as_number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad_request(name, name, " must be a number, got ", type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad_request(name, name, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

// An integer in [lo, hi] (1e3 style floats are not integers, as in OpenAI's schema).
int64_t as_integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(hi) || (lo > 0 && u < uint64_t(lo))) bad_request(name, name, " must be in [", lo, ", ", hi, "], got ", u);
    return int64_t(u);
  }
  if (!v.is_number_integer()) bad_request(name, name, " must be an integer, got ", type_name(v));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_request(name, name, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

std::vector<int32_t> token_ids(const json& v, const std::string& name, int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(int32_t(as_integer(v[i], name + "[" + std::to_string(i) + "]", 0, vocab_size - 1)));
  return ids;
}

// The sampling and output fields both generation endpoints take. Returns
// false for a key it does not know.
bool common_field(const std::string& key, const json& v, GenerationRequest& r) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (key == "model") {
    r.model = as_string(v, key);
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return true;
    const int64_t n = as_integer(v, key, 1, kMax);
    // max_completion_tokens (OpenAI's current name) wins over max_tokens.
    if (key == "max_completion_tokens" || !r.max_tokens) r.max_tokens = n;
  } else if (key == "temperature") {
    if (!v.is_null()) r.sampling.temperature = float(as_number(v, key, 0, 100));
  } else if (key == "top_p") {
    if (!v.is_null()) r.sampling.top_p = float(as_number(v, key, 0, 1));
    if (r.sampling.top_p <= 0) bad_request(key, "top_p must be in (0, 1], got 0");
  } else if (key == "top_k") {
    // -1 (vLLM) and 0 (llama.cpp) both mean off.
    if (!v.is_null()) r.sampling.top_k = std::max<int64_t>(0, as_integer(v, key, -1, kMax));
  } else if (key == "min_p") {
    if (!v.is_null()) r.sampling.min_p = float(as_number(v, key, 0, 1));
  } else if (key == "seed") {
    if (v.is_null()) return true;
    if (v.is_number_unsigned()) r.sampling.seed = v.get<uint64_t>();
    else r.sampling.seed = uint64_t(as_integer(v, key, std::numeric_limits<int64_t>::min(), kMax));
    r.seed_given = true;
  } else if (key == "stop") {
    if (v.is_null()) return true;
    if (v.is_string()) {
      r.stop = {v.get<std::string>()};
    } else if (v.is_array()) {
      if (v.size() > kMaxStopStrings) bad_request(key, "stop takes at most ", kMaxStopStrings, " strings, got ", v.size());
      for (const auto& s : v) r.stop.push_back(as_string(s, "stop[]"));
    } else {
      bad_request(key, "stop must be a string or an array of strings, got ", type_name(v));
    }
    for (const auto& s : r.stop) {
      if (s.empty()) bad_request(key, "stop strings must not be empty");
      if (s.size() > kMaxStopLength) bad_request(key, "stop strings are at most ", kMaxStopLength, " bytes, got ", s.size());
    }
  } else if (key == "stream") {
    if (!v.is_null()) r.stream = as_bool(v, key);
  } else if (key == "stream_options") {
    if (v.is_null()) return true;
    if (!v.is_object()) bad_request(key, "stream_options must be an object, got ", type_name(v));
    for (const auto& [k, x] : v.items()) {
      if (k == "include_usage") r.include_usage = as_bool(x, "stream_options.include_usage");
      else if (k == "continuous_usage_stats") { if (as_bool(x, "stream_options." + k)) bad_request("stream_options." + k, k, " is not supported"); }
      else bad_request("stream_options." + k, "unknown field stream_options.", k);
    }
  } else if (key == "n") {
    if (!v.is_null()) r.n = as_integer(v, key, 1, kMaxChoices);
  } else if (key == "presence_penalty") {
    if (!v.is_null()) r.sampling.presence_penalty = float(as_number(v, key, -2, 2));
  } else if (key == "frequency_penalty") {
    if (!v.is_null()) r.sampling.frequency_penalty = float(as_number(v, key, -2, 2));
  } else if (key == "repetition_penalty") {
    // vLLM's and transformers' (llama-server: repeat_penalty): > 0, 1 = off.
    if (v.is_null()) return true;
    r.sampling.repetition_penalty = float(as_number(v, key, 0, 100));
    if (r.sampling.repetition_penalty <= 0) bad_request(key, "repetition_penalty must be > 0 (1 = off), got 0");
  } else if (key == "user") {
    if (!v.is_null()) as_string(v, key);
  } else {
    return false;
  }
  return true;
}

void finish_common(GenerationRequest& r) {
  if (r.include_usage && !r.stream) bad_request("stream_options", "stream_options is only allowed with stream: true");
  // Greedy choices would all be the same reply.
  if (r.n > 1 && r.sampling.temperature == 0) bad_request("n", "n > 1 needs temperature > 0 (greedy choices are identical)");
}

// "tools": [{"type": "function", "function": {"name": ..., ...}}, ...]. The
// array's text is taken from an order-keeping parse, so the schemas reach
// the prompt with the client's key order (as DeepSeek's encoder writes them).
void parse_tools(std::string_view body, const json& v, GenerationRequest& r) {
  if (v.is_null()) return;
  if (!v.is_array()) bad_request("tools", "tools must be an array, got ", type_name(v));
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = v[i];
    if (!t.is_object()) bad_request(at, at, " must be an object, got ", type_name(t));
    if (!t.contains("type") || as_string(t["type"], at + ".type") != "function")
      bad_request(at + ".type", at, ".type must be \"function\"");
    if (!t.contains("function") || !t["function"].is_object()) bad_request(at + ".function", at, " has no function object");
    const json& f = t["function"];
    if (!f.contains("name")) bad_request(at + ".function.name", at, " has no function name");
    const std::string name = as_string(f["name"], at + ".function.name");
    if (name.empty() || name.find_first_of("\"<>\n") != std::string::npos)
      bad_request(at + ".function.name", at, ".function.name must be non-empty, without quotes, '<', '>' or newlines");
    if (f.contains("parameters") && !f["parameters"].is_object())
      bad_request(at + ".function.parameters", at, ".function.parameters must be an object");
    r.tool_names.push_back(name);
  }
  if (r.tool_names.empty()) return;
  const auto ordered = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false);
  r.tools = ordered["tools"].dump(-1, ' ', false, json::error_handler_t::replace);
}

void parse_tool_choice(const json& v, GenerationRequest& r) {
  if (v.is_null()) return;
  if (v.is_string()) {
    const std::string c = v.get<std::string>();
    if (c == "auto") r.tool_choice = ToolChoice::Auto;
    else if (c == "none") r.tool_choice = ToolChoice::None;
    else if (c == "required") r.tool_choice = ToolChoice::Required;
    else bad_request("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}, got \"", c, "\"");
    return;
  }
  if (!v.is_object() || !v.contains("function") || !v["function"].is_object() || !v["function"].contains("name"))
    bad_request("tool_choice", "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  r.tool_choice = ToolChoice::Named;
  r.tool_choice_name = as_string(v["function"]["name"], "tool_choice.function.name");
}

ChatMessage parse_message(const json& m, size_t index) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) bad_request(at, at, " must be an object, got ", type_name(m));
  ChatMessage msg;
  if (!m.contains("role")) bad_request(at + ".role", at, " has no role");
  const std::string role = as_string(m["role"], at + ".role");
  if (role == "system") msg.role = ChatRole::System;
  else if (role == "developer") msg.role = ChatRole::Developer;
  else if (role == "user") msg.role = ChatRole::User;
  else if (role == "assistant") msg.role = ChatRole::Assistant;
  else if (role == "tool") msg.role = ChatRole::Tool;
  else bad_request(at + ".role", at, ".role must be system, developer, user, assistant or tool, got \"", role, "\"");
  for (const auto& [key, v] : m.items()) {
    const std::string name = at + "." + key;
    if (key == "role" || key == "name") {
      if (key == "name") as_string(v, name);
    } else if (key == "content") {
      if (v.is_null()) continue;
      if (v.is_string()) {
        msg.content = v.get<std::string>();
      } else if (v.is_array()) {
        // [{"type": "text", "text": "..."}]: the parts are joined.
        for (size_t i = 0; i < v.size(); ++i) {
          const json& part = v[i];
          const std::string pn = name + "[" + std::to_string(i) + "]";
          if (!part.is_object()) bad_request(pn, pn, " must be an object");
          if (!part.contains("type") || as_string(part["type"], pn + ".type") != "text")
            bad_request(pn + ".type", pn, ": only text parts are supported");
          if (!part.contains("text")) bad_request(pn + ".text", pn, " has no text");
          msg.content += as_string(part["text"], pn + ".text");
        }
      } else {
        bad_request(name, name, " must be a string or an array of text parts, got ", type_name(v));
      }
    } else if ((key == "reasoning_content" || key == "reasoning") && msg.role == ChatRole::Assistant) {
      if (!v.is_null()) msg.reasoning_content = as_string(v, name);
    } else if (key == "tool_call_id" && msg.role == ChatRole::Tool) {
      msg.tool_call_id = as_string(v, name);
    } else if (key == "tool_calls" && msg.role == ChatRole::Assistant) {
      if (v.is_null()) continue;
      if (!v.is_array()) bad_request(name, name, " must be an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const json& c = v[i];
        const std::string cn = name + "[" + std::to_string(i) + "]";
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          bad_request(cn, cn, " must be an object with a function");
        ToolCall call;
        if (c.contains("id")) call.id = as_string(c["id"], cn + ".id");
        const json& f = c["function"];
        if (!f.contains("name")) bad_request(cn + ".function.name", cn, " has no function name");
        call.name = as_string(f["name"], cn + ".function.name");
        call.arguments = f.contains("arguments") ? as_string(f["arguments"], cn + ".function.arguments") : "{}";
        msg.tool_calls.push_back(std::move(call));
      }
    } else {
      bad_request(name, "unknown field ", name);
    }
  }
  return msg;
}

}  // namespace

GenerationRequest parse_completion_request(std::string_view body, int64_t vocab_size, const SamplingParams& defaults) {
  const json j = parse_object(body);
  GenerationRequest r;
  r.sampling = defaults;
  bool has_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (common_field(key, v, r)) continue;
    if (key == "prompt") {
      has_prompt = true;
      if (v.is_string()) {
        r.prompt_text = v.get<std::string>();
      } else if (v.is_array() && !v.empty() && v[0].is_number()) {
        r.prompt_ids = token_ids(v, key, vocab_size);
        r.prompt_is_ids = true;
      } else if (v.is_array() && v.size() == 1) {
        // A batch of one: ["text"] or [[ids]].
        if (v[0].is_string()) r.prompt_text = v[0].get<std::string>();
        else if (v[0].is_array()) { r.prompt_ids = token_ids(v[0], "prompt[0]", vocab_size); r.prompt_is_ids = true; }
        else bad_request(key, "prompt[0] must be a string or an array of token ids, got ", type_name(v[0]));
      } else if (v.is_array() && v.size() > 1) {
        bad_request(key, "prompt: one prompt per request (got a batch of ", v.size(), ")");
      } else {
        bad_request(key, "prompt must be a string or an array of token ids, got ", type_name(v));
      }
    } else if (key == "logprobs") {
      // Completions: the number of most likely tokens to list (0: the sampled one only).
      if (v.is_null()) continue;
      r.logprobs = true;
      r.top_logprobs = as_integer(v, key, 0, kMaxTopLogprobs);
    } else if (key == "echo") {
      if (!v.is_null() && as_bool(v, key)) bad_request(key, "echo is not supported yet");
    } else if (key == "suffix") {
      if (!v.is_null()) bad_request(key, "suffix is not supported");
    } else {
      bad_request(key, "unknown field ", key);
    }
  }
  if (!has_prompt) bad_request("prompt", "prompt is required");
  if (r.prompt_is_ids ? r.prompt_ids.empty() : r.prompt_text.empty()) bad_request("prompt", "prompt is empty");
  finish_common(r);
  return r;
}

GenerationRequest parse_chat_request(std::string_view body, const SamplingParams& defaults) {
  const json j = parse_object(body);
  GenerationRequest r;
  r.sampling = defaults;
  bool has_messages = false;
  // Thinking is off unless asked for; an explicit chat_template_kwargs.thinking
  // wins over reasoning_effort and DeepSeek's thinking.type.
  std::optional<bool> kwargs_thinking, effort_thinking, type_thinking;
  bool top_given = false;
  for (const auto& [key, v] : j.items()) {
    if (common_field(key, v, r)) continue;
    if (key == "messages") {
      has_messages = true;
      if (!v.is_array()) bad_request(key, "messages must be an array, got ", type_name(v));
      for (size_t i = 0; i < v.size(); ++i) r.messages.push_back(parse_message(v[i], i));
    } else if (key == "chat_template_kwargs") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad_request(key, "chat_template_kwargs must be an object, got ", type_name(v));
      for (const auto& [k, x] : v.items()) {
        const std::string name = "chat_template_kwargs." + k;
        if (k == "thinking" || k == "enable_thinking") kwargs_thinking = as_bool(x, name);
        else bad_request(name, "unknown field ", name, " (known: thinking, enable_thinking)");
      }
    } else if (key == "reasoning_effort") {
      if (v.is_null()) continue;
      const std::string e = as_string(v, key);
      if (e == "none") effort_thinking = false;
      else if (e == "minimal" || e == "low") effort_thinking = true, r.effort = ReasoningEffort::Low;
      else if (e == "medium") effort_thinking = true, r.effort = ReasoningEffort::Medium;
      else if (e == "high") effort_thinking = true, r.effort = ReasoningEffort::High;
      else if (e == "max") effort_thinking = true, r.effort = ReasoningEffort::Max;
      else bad_request(key, "reasoning_effort must be none, minimal, low, medium, high or max, got \"", e, "\"");
    } else if (key == "thinking") {
      // DeepSeek's API: {"type": "enabled" | "disabled"}.
      if (v.is_null()) continue;
      if (!v.is_object() || !v.contains("type")) bad_request(key, "thinking must be {\"type\": \"enabled\" | \"disabled\"}");
      const std::string t = as_string(v["type"], "thinking.type");
      if (t != "enabled" && t != "disabled") bad_request("thinking.type", "thinking.type must be enabled or disabled, got \"", t, "\"");
      type_thinking = t == "enabled";
    } else if (key == "logprobs") {
      if (!v.is_null()) r.logprobs = as_bool(v, key);
    } else if (key == "top_logprobs") {
      if (v.is_null()) continue;
      r.top_logprobs = as_integer(v, key, 0, kMaxTopLogprobs);
      top_given = true;
    } else if (key == "tools") {
      parse_tools(body, v, r);
    } else if (key == "tool_choice") {
      parse_tool_choice(v, r);
    } else if (key == "parallel_tool_calls") {
      if (!v.is_null()) r.parallel_tool_calls = as_bool(v, key);
    } else if (key == "response_format") {
      if (!v.is_null()) bad_request(key, key, " is not supported yet");
    } else {
      bad_request(key, "unknown field ", key);
    }
  }
  if (!has_messages || r.messages.empty()) bad_request("messages", "messages must hold at least one message");
  if (top_given && !r.logprobs) bad_request("top_logprobs", "top_logprobs needs logprobs: true");
  r.thinking = kwargs_thinking.value_or(effort_thinking.value_or(type_thinking.value_or(false)));
  if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) {
    if (r.tool_names.empty()) bad_request("tool_choice", "tool_choice forces a call, but no tools are given");
    if (r.tool_choice == ToolChoice::Named &&
        std::find(r.tool_names.begin(), r.tool_names.end(), r.tool_choice_name) == r.tool_names.end())
      bad_request("tool_choice", "tool_choice names `", r.tool_choice_name, "`, which is not among the tools");
    // The call is forced by writing its opening into the prompt; in thinking
    // mode it would have to come after the reasoning, mid-generation.
    if (r.thinking) bad_request("tool_choice", "a forced tool_choice (required or a named function) needs thinking off");
  }
  finish_common(r);
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json j = parse_object(body);
  TokenizeRequest r;
  bool has = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "model") r.model = as_string(v, key);
    else if (key == "content" || key == "prompt") { r.content = as_string(v, key); has = true; }
    else if (key == "add_special") r.add_special = as_bool(v, key);
    else bad_request(key, "unknown field ", key);
  }
  if (!has) bad_request("content", "content is required");
  return r;
}

DetokenizeRequest parse_detokenize_request(std::string_view body, int64_t vocab_size) {
  const json j = parse_object(body);
  DetokenizeRequest r;
  bool has = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      r.model = as_string(v, key);
    } else if (key == "tokens") {
      if (!v.is_array()) bad_request(key, "tokens must be an array of token ids, got ", type_name(v));
      r.tokens = token_ids(v, key, vocab_size);
      has = true;
    } else {
      bad_request(key, "unknown field ", key);
    }
  }
  if (!has) bad_request("tokens", "tokens is required");
  return r;
}

}  // namespace nibble::server
