#include "tokenizer/chat_kimi.h"

#include <nlohmann/json.hpp>

#include "tokenizer/python_json.h"
#include "util/error.h"

namespace nibble {
namespace {

constexpr std::string_view kSystem = "<|im_system|>";
constexpr std::string_view kUser = "<|im_user|>";
constexpr std::string_view kAssistant = "<|im_assistant|>";
constexpr std::string_view kMiddle = "<|im_middle|>";
constexpr std::string_view kEos = "[EOS]";
constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kArgBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kCallEnd = "<|tool_call_end|>";

// The template's fixed system prompt when the conversation brings none.
constexpr std::string_view kDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";

const char* role_name(ChatRole r) {
  switch (r) {
    case ChatRole::System: return "system";
    case ChatRole::Developer: return "developer";
    case ChatRole::User: return "user";
    case ChatRole::Assistant: return "assistant";
    case ChatRole::Tool: return "tool";
  }
  return "user";
}

// Every message's tools (OpenAI arrays) joined into one array, keys sorted:
// nlohmann::json's objects are std::maps, sorted as Python's sorted() sorts
// str keys (UTF-8 byte order is code point order).
nlohmann::json collect_tools(std::span<const ChatMessage> messages) {
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].tools.empty()) continue;
    nlohmann::json t;
    try {
      t = nlohmann::json::parse(messages[i].tools);
    } catch (const nlohmann::json::exception& e) {
      fail("messages[", i, "].tools: invalid JSON: ", e.what());
    }
    if (!t.is_array()) fail("messages[", i, "].tools: expected a JSON array");
    for (auto& x : t) all.push_back(std::move(x));
  }
  return all;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// "functions.get_weather:0" -> "get_weather".
std::string call_name(std::string_view id) {
  std::string_view name = id;
  const size_t colon = name.rfind(':');
  if (colon != std::string_view::npos) name = name.substr(0, colon);
  const size_t dot = name.find('.');
  if (dot != std::string_view::npos) name = name.substr(dot + 1);
  return std::string(name);
}

}  // namespace

std::string encode_kimi_chat(std::span<const ChatMessage> messages) {
  std::string out;
  const nlohmann::json tools = collect_tools(messages);
  if (!tools.empty()) {
    out += kSystem;
    out += "tool_declare";
    out += kMiddle;
    out += "\n  # Tools\n  ";
    out += python_json(tools);
    out += kKimiImEnd;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && m.role != ChatRole::System) {
      out += kSystem;
      out += "system";
      out += kMiddle;
      out += kDefaultSystem;
      out += kKimiImEnd;
    }
    if (m.role == ChatRole::User) {
      out += kUser;
      out += "user";
      out += kMiddle;
    } else if (m.role == ChatRole::Assistant) {
      out += kAssistant;
      out += "assistant";
      out += kMiddle;
    } else {
      out += kSystem;
      out += role_name(m.role);
      out += kMiddle;
      out += '\n';
    }
    if (m.role == ChatRole::Assistant && !m.tool_calls.empty()) {
      out += m.content;
      out += kSectionBegin;
      for (const ToolCall& c : m.tool_calls) {
        out += kCallBegin;
        out += c.id;
        out += kArgBegin;
        out += c.arguments;  // a string in OpenAI's messages: written as is
        out += kCallEnd;
      }
      out += kSectionEnd;
    } else if (m.role == ChatRole::Tool) {
      out += "## Return of ";
      out += m.tool_call_id;
      out += "\n    ";
      out += m.content;
    } else {
      out += m.content;
    }
    out += kKimiImEnd;
  }
  out += kAssistant;
  out += "assistant";
  out += kMiddle;
  return out;
}

ParsedCompletion parse_kimi_completion(std::string_view text, bool require_end) {
  ParsedCompletion pc;
  // The end: <|im_end|> is K2's end of turn; [EOS] is accepted too.
  size_t end = text.find(kKimiImEnd);
  size_t eos = text.find(kEos);
  if (eos != std::string_view::npos && (end == std::string_view::npos || eos < end)) end = eos;
  std::string_view body = text;
  if (end != std::string_view::npos) {
    body = text.substr(0, end);
    pc.finished = true;
  } else if (require_end) {
    fail("Kimi reply: no ", kKimiImEnd, " at the end");
  }
  const size_t section = body.find(kSectionBegin);
  pc.content = std::string(body.substr(0, section));
  if (section == std::string_view::npos) return pc;

  std::string_view rest = body.substr(section + kSectionBegin.size());
  while (true) {
    rest = trim(rest);
    if (rest.empty()) {
      if (pc.finished) fail("Kimi reply: the tool-call section has no ", kSectionEnd);
      return pc;  // cut off inside the section
    }
    if (rest.substr(0, kSectionEnd.size()) == kSectionEnd) {
      rest = trim(rest.substr(kSectionEnd.size()));
      if (!rest.empty()) fail("Kimi reply: text after the tool-call section: '", std::string(rest.substr(0, 40)), "'");
      return pc;
    }
    if (rest.substr(0, kCallBegin.size()) != kCallBegin) {
      if (!pc.finished && kSectionEnd.substr(0, rest.size()) == rest) return pc;  // a marker still arriving
      if (!pc.finished && kCallBegin.substr(0, rest.size()) == rest) return pc;
      fail("Kimi reply: expected ", kCallBegin, " or ", kSectionEnd, " in the tool-call section, got '",
           std::string(rest.substr(0, 40)), "'");
    }
    rest.remove_prefix(kCallBegin.size());
    const size_t arg = rest.find(kArgBegin);
    const size_t call_end = rest.find(kCallEnd);
    if (arg == std::string_view::npos || call_end == std::string_view::npos || call_end < arg) {
      if (!pc.finished) return pc;  // the call is still being written
      fail("Kimi reply: a tool call without ", kArgBegin, " and ", kCallEnd);
    }
    ToolCall c;
    c.id = std::string(trim(rest.substr(0, arg)));
    if (c.id.empty()) fail("Kimi reply: a tool call with no id");
    c.name = call_name(c.id);
    c.arguments = std::string(trim(rest.substr(arg + kArgBegin.size(), call_end - arg - kArgBegin.size())));
    pc.tool_calls.push_back(std::move(c));
    rest.remove_prefix(call_end + kCallEnd.size());
  }
}

}  // namespace nibble
