#include "server/choice_builder.h"

namespace nibble::server {
namespace {

using nlohmann::json;

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

ChoiceBuilder::ChoiceBuilder(size_t index, ChoiceOptions options, TokenText token_text, TokenText token_bytes)
    : index_(index), opt_(std::move(options)), token_text_(std::move(token_text)), token_bytes_(std::move(token_bytes)),
      parser_(opt_.start == ReplyParser::Start::Content && opt_.thinking ? ReplyParser::Start::Reasoning : opt_.start,
              opt_.forced_name, opt_.whole) {
  if (opt_.chat) all_logprobs_ = json::array();
  else all_logprobs_ = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                        {"top_logprobs", json::array()}, {"text_offset", json::array()}};
}

// Chat: [{"token", "logprob", "bytes", "top_logprobs": [...]}] (OpenAI's
// chat shape). Completions: the four parallel arrays of the legacy API.
json ChoiceBuilder::logprob_entries(const std::vector<TokenLogprob>& lps) {
  if (opt_.chat) {
    json content = json::array();
    // OpenAI's `bytes`: what the token is, which its text (U+FFFD for a
    // partial UTF-8 character) cannot always say.
    auto bytes = [&](int32_t id, const std::string& text) { return bytes_of(token_bytes_ ? token_bytes_(id) : text); };
    for (const auto& lp : lps) {
      const std::string t = token_text_(lp.token);
      json top = json::array();
      for (const auto& [id, v] : lp.top) {
        const std::string s = token_text_(id);
        top.push_back({{"token", s}, {"logprob", v}, {"bytes", bytes(id, s)}});
      }
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes(lp.token, t)}, {"top_logprobs", top}});
    }
    return content;
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const auto& lp : lps) {
    const std::string t = token_text_(lp.token);
    json top = json::object();
    for (const auto& [id, v] : lp.top) top[token_text_(id)] = v;
    out["tokens"].push_back(t);
    out["token_logprobs"].push_back(lp.logprob);
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(text_offset_);
    text_offset_ += int64_t(t.size());
  }
  return out;
}

void ChoiceBuilder::keep_calls(std::vector<ParsedToolCall>& calls) const {
  if (opt_.tool_choice == ToolChoice::None) calls.clear();
  if (!opt_.parallel_tool_calls) std::erase_if(calls, [](const ParsedToolCall& c) { return c.index > 0; });
}

ChoiceBuilder::Piece ChoiceBuilder::absorb(const JobUpdate& u) {
  Piece p;
  if (opt_.chat) {
    p.reply = parser_.push(u.text);
    if (u.done) {
      ReplyDelta rest = parser_.finish();
      p.reply.reasoning += rest.reasoning;
      p.reply.content += rest.content;
      for (auto& c : rest.tool_calls) p.reply.tool_calls.push_back(std::move(c));
    }
    keep_calls(p.reply.tool_calls);
    calls_ += p.reply.tool_calls.size();
  } else {
    p.text = u.text;
  }
  if (opt_.logprobs && !u.logprobs.empty()) p.logprobs = logprob_entries(u.logprobs);
  if (u.done) {
    done_ = true;
    finish_ = u.finish_reason;
    if (calls_ > 0 && (finish_ == "stop" || finish_ == "length") &&
        (opt_.tool_choice == ToolChoice::Auto || opt_.tool_choice == ToolChoice::Required))
      finish_ = "tool_calls";
  }
  return p;
}

json ChoiceBuilder::tool_call_json(const ParsedToolCall& c) const {
  return {{"id", opt_.call_id_prefix + std::to_string(c.index)},
          {"type", "function"},
          {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

std::vector<json> ChoiceBuilder::stream(const JobUpdate& u) {
  std::vector<json> out;
  Piece p = absorb(u);
  const bool failed = done_ && finish_ != "stop" && finish_ != "length" && finish_ != "tool_calls";
  // The role comes with the first token, not at accept time, so
  // time-to-first-token means what load generators assume.
  if (opt_.chat && !role_sent_ && (u.completion_tokens > 0 || u.done) && !failed) {
    out.push_back({{"index", index_},
                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}});
    role_sent_ = true;
  }
  json delta = json::object();
  if (opt_.chat) {
    if (!p.reply.reasoning.empty()) delta["reasoning_content"] = p.reply.reasoning;
    if (!p.reply.content.empty()) delta["content"] = p.reply.content;
    if (!p.reply.tool_calls.empty()) {
      json calls = json::array();
      for (const auto& c : p.reply.tool_calls) {
        json j = tool_call_json(c);
        j["index"] = c.index;  // the position in the message's tool_calls, as OpenAI streams it
        calls.push_back(std::move(j));
      }
      delta["tool_calls"] = std::move(calls);
    }
  }
  const bool has_text = opt_.chat ? !delta.empty() : !p.text.empty();
  if (has_text || !p.logprobs.is_null()) {
    json c = {{"index", index_}, {"finish_reason", nullptr}};
    if (opt_.chat) {
      c["delta"] = std::move(delta);
      c["logprobs"] = p.logprobs.is_null() ? json(nullptr) : json{{"content", p.logprobs}, {"refusal", nullptr}};
    } else {
      c["text"] = p.text;
      c["logprobs"] = p.logprobs;
    }
    out.push_back(std::move(c));
  }
  if (done_ && !failed) {
    json c = {{"index", index_}, {"logprobs", nullptr}, {"finish_reason", finish_}};
    if (opt_.chat) c["delta"] = json::object();
    else c["text"] = "";
    out.push_back(std::move(c));
  }
  return out;
}

void ChoiceBuilder::add(const JobUpdate& u) {
  Piece p = absorb(u);
  if (opt_.chat) {
    reasoning_ += p.reply.reasoning;
    content_ += p.reply.content;
    for (auto& c : p.reply.tool_calls) tool_calls_.push_back(std::move(c));
    if (!p.logprobs.is_null())
      for (auto& e : p.logprobs) all_logprobs_.push_back(std::move(e));
  } else {
    content_ += p.text;
    if (!p.logprobs.is_null())
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (auto& e : p.logprobs[k]) all_logprobs_[k].push_back(std::move(e));
  }
}

json ChoiceBuilder::whole() const {
  json choice = {{"index", index_}, {"finish_reason", finish_}};
  if (!opt_.chat) {
    choice["text"] = content_;
    choice["logprobs"] = opt_.logprobs ? all_logprobs_ : json(nullptr);
    return choice;
  }
  json msg = {{"role", "assistant"}};
  // OpenAI: content is null when the reply is only tool calls.
  msg["content"] = content_.empty() && !tool_calls_.empty() ? json(nullptr) : json(content_);
  if (opt_.thinking) msg["reasoning_content"] = reasoning_;
  if (!tool_calls_.empty()) {
    json calls = json::array();
    for (const auto& c : tool_calls_) calls.push_back(tool_call_json(c));
    msg["tool_calls"] = std::move(calls);
  }
  choice["message"] = std::move(msg);
  choice["logprobs"] = opt_.logprobs ? json{{"content", all_logprobs_}, {"refusal", nullptr}} : json(nullptr);
  return choice;
}

}  // namespace nibble::server
