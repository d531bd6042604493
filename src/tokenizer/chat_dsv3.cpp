#include "tokenizer/chat_dsv3.h"

#include "util/error.h"

namespace nibble {
namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kOutputsBegin = "<｜tool▁outputs▁begin｜>";
constexpr std::string_view kOutputsEnd = "<｜tool▁outputs▁end｜>";
constexpr std::string_view kOutputBegin = "<｜tool▁output▁begin｜>";
constexpr std::string_view kOutputEnd = "<｜tool▁output▁end｜>";

void append_call(std::string& out, const ToolCall& c) {
  out += kCallBegin;
  out += "function";  // OpenAI's tool type: every call is a function call
  out += kSep;
  out += c.name;
  out += "\n```json\n";
  out += c.arguments;
  out += "\n```";
  out += kCallEnd;
}

bool is_system(ChatRole r) { return r == ChatRole::System || r == ChatRole::Developer; }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::string encode_dsv3_chat(std::span<const ChatMessage> messages) {
  std::string out(kBos);
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (!is_system(m.role)) continue;
    if (!first_system) out += "\n\n";
    out += m.content;
    first_system = false;
  }
  bool first_call = true;     // ns.is_first, never reset
  bool in_tool = false;       // ns.is_tool
  bool first_output = true;   // ns.is_output_first, never reset
  for (const ChatMessage& m : messages) {
    if (m.role == ChatRole::User) {
      in_tool = false;
      out += kUser;
      out += m.content;
    } else if (m.role == ChatRole::Assistant && m.content.empty() && !m.tool_calls.empty()) {
      // The template's "content is none" branch: a message of calls only.
      in_tool = false;
      for (const ToolCall& c : m.tool_calls) {
        if (first_call) {
          out += kAssistant;
          out += kCallsBegin;
          append_call(out, c);
          first_call = false;
        } else {
          out += '\n';
          append_call(out, c);
          out += kCallsEnd;
          out += kEos;
        }
      }
    } else if (m.role == ChatRole::Assistant) {
      out += in_tool ? kOutputsEnd : kAssistant;
      out += m.content;
      out += kEos;
      in_tool = false;
    } else if (m.role == ChatRole::Tool) {
      in_tool = true;
      if (first_output) {
        out += kOutputsBegin;
        first_output = false;
      } else {
        out += '\n';
      }
      out += kOutputBegin;
      out += m.content;
      out += kOutputEnd;
    }
  }
  if (in_tool) {
    out += kOutputsEnd;
  } else {
    out += kAssistant;
  }
  return out;
}

ParsedCompletion parse_dsv3_completion(std::string_view text, bool require_end) {
  ParsedCompletion pc;
  const size_t end = text.find(kEos);
  std::string_view body = text;
  if (end != std::string_view::npos) {
    body = text.substr(0, end);
    pc.finished = true;
  } else if (require_end) {
    fail("DeepSeek-V3 reply: no ", kEos, " at the end");
  }
  const size_t calls = body.find(kCallsBegin);
  pc.content = std::string(body.substr(0, calls));
  if (calls == std::string_view::npos) return pc;
  std::string_view rest = body.substr(calls + kCallsBegin.size());
  while (true) {
    rest = trim(rest);
    if (rest.empty()) {
      if (pc.finished) fail("DeepSeek-V3 reply: the tool calls have no ", kCallsEnd);
      return pc;
    }
    if (starts_with(rest, kCallsEnd)) {
      rest = trim(rest.substr(kCallsEnd.size()));
      if (!rest.empty()) fail("DeepSeek-V3 reply: text after the tool calls: '", std::string(rest.substr(0, 40)), "'");
      return pc;
    }
    if (!starts_with(rest, kCallBegin)) {
      if (!pc.finished && (starts_with(kCallBegin, rest) || starts_with(kCallsEnd, rest))) return pc;
      fail("DeepSeek-V3 reply: expected ", kCallBegin, " or ", kCallsEnd, ", got '", std::string(rest.substr(0, 40)),
           "'");
    }
    rest.remove_prefix(kCallBegin.size());
    const size_t call_end = rest.find(kCallEnd);
    if (call_end == std::string_view::npos) {
      if (!pc.finished) return pc;  // still being written
      fail("DeepSeek-V3 reply: a tool call without ", kCallEnd);
    }
    const std::string_view call = rest.substr(0, call_end);
    rest.remove_prefix(call_end + kCallEnd.size());
    const size_t sep = call.find(kSep);
    if (sep == std::string_view::npos) fail("DeepSeek-V3 reply: a tool call without ", kSep);
    const std::string_view after = call.substr(sep + kSep.size());
    const size_t fence = after.find("```json");
    const size_t close = after.rfind("```");
    if (fence == std::string_view::npos || close == std::string_view::npos || close <= fence)
      fail("DeepSeek-V3 reply: a tool call's arguments are not in a ```json block");
    ToolCall c;
    c.name = std::string(trim(after.substr(0, fence)));
    if (c.name.empty()) fail("DeepSeek-V3 reply: a tool call with no name");
    c.arguments = std::string(trim(after.substr(fence + 7, close - fence - 7)));
    pc.tool_calls.push_back(std::move(c));
  }
}

}  // namespace nibble
