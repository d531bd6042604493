#include "tokenizer/chat_dsv4.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "tokenizer/dsv4_markup.h"
#include "tokenizer/python_json.h"
#include "util/error.h"

namespace nibble {
namespace {

using ojson = nlohmann::ordered_json;  // keeps key order, like a Python dict

// ---------------------------------------------------------------- tokens

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
using dsv4::kDsml;
using dsv4::kThinkEnd;
using dsv4::kThinkStart;

// The fixed texts below are part of the model's prompt format (DeepSeek's
// encoding_dsv4.py): the model was trained on them verbatim.
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The tools section of a system prompt; {tool_schemas} is replaced by one
// JSON object per line.
constexpr std::string_view kToolsTemplate =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
    "{tool_schemas}\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// ---------------------------------------------------------------- JSON

std::string python_json_string(std::string_view s) { return python_json(ojson(std::string(s))); }

ojson parse_json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const ojson::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
}

// ---------------------------------------------------------------- encoding

// One user turn's parts after tool messages are merged in.
struct Block {
  bool tool_result = false;
  std::string text;     // text, or the tool's output
  std::string call_id;  // tool results: which call they answer
};

// A message after merging: user turns carry blocks, others point at the input.
struct Turn {
  ChatRole role;
  const ChatMessage* msg = nullptr;  // null for merged user turns
  std::vector<Block> blocks;         // user turns
  bool keep_reasoning = true;        // false once dropped as history
  size_t source = 0;                 // index of the (first) input message, for errors
};

std::string render_tools(const std::string& tools_json, size_t index) {
  const std::string what = "chat message " + std::to_string(index) + ": tools";
  const ojson tools = parse_json(tools_json, what);
  if (!tools.is_array()) fail(what, ": expected a JSON array of {\"type\": \"function\", \"function\": {...}}");
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].is_object() || !tools[i].contains("function")) fail(what, "[", i, "]: missing \"function\"");
    if (i) schemas += '\n';
    schemas += python_json(tools[i]["function"]);
  }
  std::string out(kToolsTemplate);
  const std::string_view placeholder = "{tool_schemas}";
  out.replace(out.find(placeholder), placeholder.size(), schemas);
  return out;
}

// Whether the message has a non-empty tools list (Python's `if tools:`).
bool has_tools(const ChatMessage& m, size_t index) {
  if (m.tools.empty()) return false;
  const ojson t = parse_json(m.tools, "chat message " + std::to_string(index) + ": tools");
  return !(t.is_null() || (t.is_array() && t.empty()) || (t.is_object() && t.empty()));
}

// system/developer extras: "\n\n" + tools section, "\n\n" + response format.
std::string render_extras(const ChatMessage& m, size_t index) {
  std::string out;
  if (has_tools(m, index)) out += "\n\n" + render_tools(m.tools, index);
  if (!m.response_format.empty()) {
    const ojson rf = parse_json(m.response_format, "chat message " + std::to_string(index) + ": response_format");
    if (!(rf.is_null() || (rf.is_object() && rf.empty()))) {
      out += "\n\n";
      out += kResponseFormatPrefix;
      out += python_json(rf);
    }
  }
  return out;
}

// "<｜DSML｜parameter name=.. string=..>..</｜DSML｜parameter>" lines of one call.
std::string render_arguments(const ToolCall& call, size_t index) {
  ojson args;
  try {
    args = ojson::parse(call.arguments);
  } catch (const ojson::exception&) {
    // Not JSON: passed through whole as one string parameter.
    args = ojson::object({{"arguments", call.arguments}});
  }
  if (!args.is_object()) {
    fail("chat message ", index, ": tool call '", call.name, "': arguments must be a JSON object");
  }
  std::string out;
  bool first = true;
  for (const auto& [key, value] : args.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_str = value.is_string();
    out += std::string(dsv4::kParamOpen) + key + std::string(dsv4::kStringFlag) + (is_str ? "true" : "false") + "\">";
    out += is_str ? value.get<std::string>() : python_json(value);
    out += dsv4::kParamClose;
  }
  return out;
}

std::string render_tool_calls(const std::vector<ToolCall>& calls, size_t index) {
  std::string out = "\n\n" + std::string(dsv4::kCallsOpen) + "\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out += '\n';
    out += std::string(dsv4::kInvokeOpen) + calls[i].name + "\">\n";
    out += render_arguments(calls[i], index);
    out += "\n";
    out += dsv4::kInvokeClose;
  }
  out += "\n";
  out += dsv4::kCallsClose;
  return out;
}

// Tool messages join the user turn that follows them; consecutive user and
// tool messages form one turn.
std::vector<Turn> merge_turns(std::span<const ChatMessage> messages) {
  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == ChatRole::Tool || m.role == ChatRole::User) {
      Block b;
      b.tool_result = m.role == ChatRole::Tool;
      b.text = m.content;
      b.call_id = m.tool_call_id;
      if (turns.empty() || turns.back().role != ChatRole::User) turns.push_back({ChatRole::User, nullptr, {}, true, i});
      turns.back().blocks.push_back(std::move(b));
    } else {
      turns.push_back({m.role, &m, {}, true, i});
    }
  }
  return turns;
}

// Within a user turn, tool results follow the order of the calls made by
// the latest assistant message that made calls (a stable sort; unknown ids
// sort as the first call).
void order_tool_results(std::vector<Turn>& turns) {
  std::map<std::string, size_t> order;
  for (Turn& t : turns) {
    if (t.role == ChatRole::Assistant && !t.msg->tool_calls.empty()) {
      order.clear();
      for (size_t k = 0; k < t.msg->tool_calls.size(); ++k) {
        if (!t.msg->tool_calls[k].id.empty()) order[t.msg->tool_calls[k].id] = k;
      }
    } else if (t.role == ChatRole::User && !order.empty()) {
      std::vector<Block> results;
      for (const Block& b : t.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      auto rank = [&](const Block& b) {
        const auto it = order.find(b.call_id);
        return it == order.end() ? size_t(0) : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      size_t next = 0;
      for (Block& b : t.blocks)
        if (b.tool_result) b = results[next++];
    }
  }
}

bool is_user_like(ChatRole r) { return r == ChatRole::User || r == ChatRole::Developer; }

// Index of the last user or developer turn, or -1.
long last_user_index(const std::vector<Turn>& turns) {
  for (size_t i = turns.size(); i-- > 0;)
    if (is_user_like(turns[i].role)) return static_cast<long>(i);
  return -1;
}

}  // namespace

ChatRole parse_chat_role(std::string_view role) {
  if (role == "system") return ChatRole::System;
  if (role == "developer") return ChatRole::Developer;
  if (role == "user") return ChatRole::User;
  if (role == "assistant") return ChatRole::Assistant;
  if (role == "tool") return ChatRole::Tool;
  fail("chat message role '", role, "': expected system, developer, user, assistant or tool");
}

std::string encode_dsv4_chat(std::span<const ChatMessage> messages, const ChatEncodeOptions& options) {
  const bool thinking = options.mode == ThinkingMode::Thinking;
  std::vector<Turn> turns = merge_turns(messages);
  order_tool_results(turns);

  bool drop = options.drop_thinking;
  for (size_t i = 0; i < messages.size(); ++i)
    if (has_tools(messages[i], i)) drop = false;  // tool use keeps every turn's reasoning

  if (thinking && drop) {
    // History before the last user turn: assistant reasoning is dropped,
    // developer turns are removed.
    const long last = last_user_index(turns);
    std::vector<Turn> kept;
    for (size_t i = 0; i < turns.size(); ++i) {
      Turn t = turns[i];
      if (static_cast<long>(i) < last) {
        if (t.role == ChatRole::Developer) continue;
        if (t.role == ChatRole::Assistant) t.keep_reasoning = false;
      }
      kept.push_back(std::move(t));
    }
    turns = std::move(kept);
  }

  const long last_user = last_user_index(turns);
  std::string prompt = options.add_bos ? std::string(kBos) : std::string();
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& t = turns[i];
    const auto idx = static_cast<long>(i);
    if (i == 0 && thinking && options.effort == ReasoningEffort::Max) prompt += kReasoningEffortMax;
    switch (t.role) {
      case ChatRole::System:
        prompt += t.msg->content;
        prompt += render_extras(*t.msg, t.source);
        break;
      case ChatRole::Developer:
        if (t.msg->content.empty()) fail("chat message ", t.source, ": a developer message needs content");
        prompt += kUser;
        prompt += t.msg->content;
        prompt += render_extras(*t.msg, t.source);
        break;
      case ChatRole::User:
        prompt += kUser;
        for (size_t b = 0; b < t.blocks.size(); ++b) {
          if (b) prompt += "\n\n";
          if (t.blocks[b].tool_result) {
            prompt += "<tool_result>" + t.blocks[b].text + "</tool_result>";
          } else {
            prompt += t.blocks[b].text;
          }
        }
        break;
      case ChatRole::Assistant: {
        const ChatMessage& m = *t.msg;
        if (thinking && (!drop || idx > last_user)) {
          if (t.keep_reasoning && m.reasoning_content) prompt += *m.reasoning_content;
          prompt += kThinkEnd;
        }
        prompt += m.content;
        if (!m.tool_calls.empty()) prompt += render_tool_calls(m.tool_calls, t.source);
        prompt += kEos;
        break;
      }
      case ChatRole::Tool:
        break;  // merged into user turns above
    }
    // A user turn followed by an assistant turn, or last, opens the reply.
    const bool next_is_assistant = i + 1 < turns.size() && turns[i + 1].role == ChatRole::Assistant;
    if ((i + 1 == turns.size() || next_is_assistant) && is_user_like(t.role)) {
      prompt += kAssistant;
      prompt += thinking && (!drop || idx >= last_user) ? kThinkStart : kThinkEnd;
    }
  }
  return prompt;
}

// ---------------------------------------------------------------- parsing

namespace {

// Finds the earliest of `stops` in text at or after `from`. Returns the
// position and which stop (or npos / -1).
std::pair<size_t, int> find_first(std::string_view text, size_t from, std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos;
  int which = -1, k = 0;
  for (std::string_view s : stops) {
    const size_t p = text.find(s, from);
    if (p != std::string_view::npos && p < best) best = p, which = k;
    ++k;
  }
  return {best, which};
}

// Thrown inside the DSML parser when the text ends mid-block.
struct Incomplete {};

std::string dsml(std::string_view tag) { return std::string(kDsml) + std::string(tag); }

// Parses the tool-call block starting right after "\n\n<｜DSML｜tool_calls";
// returns the index just past "</｜DSML｜tool_calls>".
size_t parse_tool_calls(std::string_view text, size_t index, std::vector<ToolCall>& calls) {
  const std::string invoke_open = "<" + dsml("invoke"), calls_close = "</" + dsml("tool_calls>");
  const std::string param_open = "<" + dsml("parameter"), invoke_close = "</" + dsml("invoke");
  const std::string param_close = "/" + dsml("parameter");
  auto expect_gap = [&](size_t from, size_t to) {
    if (text.substr(from, to - from) != ">\n") {
      fail("completion: tool call format error: expected '>\\n' but got '", text.substr(from, to - from), "'");
    }
  };
  while (true) {
    auto [p, which] = find_first(text, index, {invoke_open, calls_close});
    if (which < 0) throw Incomplete{};
    expect_gap(index, p);
    if (which == 1) return p + calls_close.size();
    index = p + invoke_open.size();

    // ` name="NAME">\n` up to the first parameter or the end of the invoke.
    auto [q, w2] = find_first(text, index, {param_open, invoke_close});
    if (w2 < 0) throw Incomplete{};
    std::string_view head = text.substr(index, q - index);
    while (!head.empty() && (head.front() == ' ' || head.front() == '\t' || head.front() == '\n')) head.remove_prefix(1);
    // DeepSeek matches ^\s*name="(.*?)">\n$ where Python's $ may also sit
    // before a final newline: a call without parameters ends ">\n\n".
    if (head.ends_with("\">\n\n")) head.remove_suffix(1);
    const std::string_view name_prefix = "name=\"", name_suffix = "\">\n";
    if (!head.starts_with(name_prefix) || !head.ends_with(name_suffix) ||
        head.size() < name_prefix.size() + name_suffix.size()) {
      fail("completion: tool name format error: '", text.substr(index, q - index), "'");
    }
    ToolCall call;
    call.name = std::string(head.substr(name_prefix.size(), head.size() - name_prefix.size() - name_suffix.size()));
    index = q + (w2 == 0 ? param_open.size() : invoke_close.size());

    // Parameters: ` name="K" string="true|false">VALUE<` then "/｜DSML｜parameter".
    std::vector<std::pair<std::string, std::pair<std::string, bool>>> params;
    int stop = w2;
    while (stop == 0) {
      const size_t end = text.find(param_close, index);
      if (end == std::string_view::npos) throw Incomplete{};
      const std::string_view body = text.substr(index, end - index);
      const std::string_view pname = " name=\"", str_true = "\" string=\"true\">", str_false = "\" string=\"false\">";
      const auto [sp, sw] = find_first(body, pname.size(), {str_true, str_false});
      std::string_view value_body = body;
      if (value_body.ends_with("<\n")) value_body.remove_suffix(1);  // Python's $ before a final newline
      if (!body.starts_with(pname) || sw < 0 || !value_body.ends_with("<")) {
        fail("completion: parameter format error: '", body, "'");
      }
      const std::string key(body.substr(pname.size(), sp - pname.size()));
      const size_t value_at = sp + (sw == 0 ? str_true.size() : str_false.size());
      if (value_at > value_body.size() - 1) fail("completion: parameter format error: '", body, "'");
      const std::string value(value_body.substr(value_at, value_body.size() - 1 - value_at));
      for (const auto& [k, v] : params)
        if (k == key) fail("completion: duplicate parameter name '", key, "' in tool call '", call.name, "'");
      params.push_back({key, {value, sw == 0}});
      index = end + param_close.size();
      auto [r, w3] = find_first(text, index, {param_open, invoke_close});
      if (w3 < 0) throw Incomplete{};
      expect_gap(index, r);
      index = r + (w3 == 0 ? param_open.size() : invoke_close.size());
      stop = w3;
    }
    // Arguments JSON text as DeepSeek rebuilds it: string values quoted,
    // other values copied verbatim.
    call.arguments = "{";
    for (size_t k = 0; k < params.size(); ++k) {
      if (k) call.arguments += ", ";
      call.arguments += python_json_string(params[k].first) + ": ";
      call.arguments += params[k].second.second ? python_json_string(params[k].second.first) : params[k].second.first;
    }
    call.arguments += "}";
    calls.push_back(std::move(call));
  }
}

void check_no_special(std::string_view s, const char* what) {
  for (std::string_view tok : {kBos, kEos, kThinkStart, kThinkEnd, kDsml}) {
    if (s.find(tok) != std::string_view::npos) fail("completion: unexpected special token '", tok, "' in ", what);
  }
}

}  // namespace

ParsedCompletion parse_dsv4_completion(std::string_view text, ThinkingMode mode, bool require_end) {
  ParsedCompletion out;
  const std::string calls_start = "\n\n<" + dsml("tool_calls");
  size_t index = 0;
  if (mode == ThinkingMode::Thinking) {
    const auto [p, which] = find_first(text, 0, {kThinkEnd, calls_start});
    if (which != 0) {
      if (require_end || which == 1) fail("completion: invalid thinking format: missing </think>");
      out.reasoning_content = std::string(text);  // cut off while thinking
      check_no_special(out.reasoning_content, "reasoning_content");
      return out;
    }
    out.reasoning_content = std::string(text.substr(0, p));
    index = p + kThinkEnd.size();
  }
  const auto [p, which] = find_first(text, index, {kEos, calls_start});
  if (which == 0) {
    out.content = std::string(text.substr(index, p - index));
    index = p + kEos.size();
    out.finished = true;
  } else if (which == 1) {
    out.content = std::string(text.substr(index, p - index));
    const size_t block = p + calls_start.size();
    try {
      index = parse_tool_calls(text, block, out.tool_calls);
    } catch (const Incomplete&) {
      if (require_end) fail("completion: tool call block is not closed");
      // Cut off inside the block: keep everything as content so nothing is lost.
      out.content = std::string(text.substr(index));
      out.tool_calls.clear();
      check_no_special(out.reasoning_content, "reasoning_content");
      return out;
    }
    // DeepSeek's parser accepts a closed tool-call block with or without the
    // end-of-sentence token after it, but nothing else.
    const size_t eos = text.find(kEos, index);
    const size_t tail_end = eos == std::string_view::npos ? text.size() : eos;
    if (tail_end != index) fail("completion: unexpected text after tool calls");
    if (eos != std::string_view::npos) {
      index = eos + kEos.size();
      out.finished = true;
    }
  } else {
    if (require_end) fail("completion: invalid format: missing end of sentence token");
    out.content = std::string(text.substr(index));
    index = text.size();
  }
  if (index != text.size()) fail("completion: unexpected text after end of sentence");
  check_no_special(out.content, "content");
  check_no_special(out.reasoning_content, "reasoning_content");
  return out;
}

}  // namespace nibble
