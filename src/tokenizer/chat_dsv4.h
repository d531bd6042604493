// DeepSeek-V4 chat encoding (docs/text.md, "Chat encoding"): messages to
// prompt text, and a completion's text back to an assistant message.
//
// DeepSeek ships no Jinja template for V4; its encoding/encoding_dsv4.py is
// the reference, and this file produces the same text:
//
//   BOS [effort prefix] system-content
//   <｜User｜>user-content<｜Assistant｜></think>assistant-content<｜end▁of▁sentence｜>
//   <｜User｜>...<｜Assistant｜><think>            (generation prompt, thinking)
//
// - A tool message becomes a <tool_result>..</tool_result> block of the
//   next user turn (consecutive user/tool messages form one turn, blocks
//   joined by a blank line; results are ordered like the calls).
// - Thinking mode: an assistant turn after the last user message keeps
//   "reasoning</think>"; earlier ones lose their reasoning, and their user
//   turn ends "<｜Assistant｜></think>". If any message carries tools, no
//   reasoning is dropped and every user turn ends "<｜Assistant｜><think>".
// - Tool calls are written in DSML after the content:
//   "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter
//   name=\"k\" string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n
//   </｜DSML｜tool_calls>".
// JSON (tool schemas, non-string arguments) is written the way Python's
// json.dumps(ensure_ascii=False) does, key order kept.
//
// The prompt is then encoded with special tokens allowed and no automatic
// BOS (Tokenizer::encode(prompt)).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

enum class ChatRole { System, Developer, User, Assistant, Tool };

// "system" | "developer" | "user" | "assistant" | "tool"; else nibble::Error.
ChatRole parse_chat_role(std::string_view role);

struct ToolCall {
  std::string id;         // the OpenAI tool_call id; orders the tool results
  std::string name;       // function name
  std::string arguments;  // JSON object text, e.g. {"city": "Paris"}
};

struct ChatMessage {
  ChatRole role = ChatRole::User;
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant: its thinking
  std::vector<ToolCall> tool_calls;              // assistant: calls it made
  std::string tool_call_id;                      // tool: the call answered
  std::string tools;            // system/developer: OpenAI "tools" array, JSON text ("" = none)
  std::string response_format;  // system/developer: JSON schema object text ("" = none)
};

enum class ThinkingMode { Chat, Thinking };

// "max" prepends DeepSeek's fixed "Reasoning Effort: Absolute maximum ..."
// paragraph in thinking mode; "high" and the default add nothing.
enum class ReasoningEffort { Default, High, Max };

struct ChatEncodeOptions {
  ThinkingMode mode = ThinkingMode::Chat;
  bool drop_thinking = true;  // drop reasoning of turns before the last user message
  bool add_bos = true;
  ReasoningEffort effort = ReasoningEffort::Default;
};

// The prompt text for `messages`. A generation prompt is obtained by ending
// with a user (or tool) message. Throws nibble::Error for invalid messages
// (a developer message without content, malformed tools JSON, tool-call
// arguments that are JSON but not an object, ...).
std::string encode_dsv4_chat(std::span<const ChatMessage> messages, const ChatEncodeOptions& options);

struct ParsedCompletion {
  std::string reasoning_content;  // thinking mode: the text before </think>
  std::string content;
  std::vector<ToolCall> tool_calls;  // arguments as Python-style JSON text
  bool finished = false;             // ended with <｜end▁of▁sentence｜>
};

// Parses the text generated after a prompt (the prompt itself excluded):
// "reasoning</think>content<｜end▁of▁sentence｜>" in thinking mode,
// "content<｜end▁of▁sentence｜>" in chat mode, content optionally followed by
// DSML tool calls. With require_end false a text cut off before EOS (or
// before </think>) is accepted and finished is false. Malformed text (bad
// DSML, text after the calls, special tokens inside content) throws
// nibble::Error.
ParsedCompletion parse_dsv4_completion(std::string_view text, ThinkingMode mode, bool require_end = true);

}  // namespace nibble
