// The chat conversation as nibble's chat formats take it (OpenAI's message
// shape), and a parsed reply. Each format (chat_dsv4.h, chat_harmony.h)
// renders these into its own prompt; chat_format.h picks one per model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
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

// OpenAI's reasoning_effort. DeepSeek-V4 reads only Max (its fixed "Reasoning
// Effort: Absolute maximum ..." paragraph); harmony writes low / medium /
// high into its system message (Default is medium there, Max is high).
enum class ReasoningEffort { Default, Low, Medium, High, Max };

// An assistant reply split into what OpenAI's API returns apart.
struct ParsedCompletion {
  std::string reasoning_content;     // DeepSeek: the text before </think>; harmony: the analysis channel
  std::string content;               // the answer (harmony: the final channel)
  std::vector<ToolCall> tool_calls;  // arguments as JSON text
  bool finished = false;             // ended with the format's end-of-reply token
};

// Text to ids, as Tokenizer::encode(text, allow_special) or
// Engine::tokenize: how a chat format reaches the tokenizer without owning it.
using TokenizeFn = std::function<std::vector<int32_t>(const std::string& text, bool allow_special)>;

}  // namespace nibble
