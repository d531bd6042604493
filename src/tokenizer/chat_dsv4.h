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

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_message.h"

namespace nibble {

struct ChatEncodeOptions {
  ThinkingMode mode = ThinkingMode::Chat;
  bool drop_thinking = true;  // drop reasoning of turns before the last user message
  bool add_bos = true;
  // Max prepends DeepSeek's fixed "Reasoning Effort: Absolute maximum ..."
  // paragraph in thinking mode; the other efforts add nothing.
  ReasoningEffort effort = ReasoningEffort::Default;
};

// The prompt text for `messages`. A generation prompt is obtained by ending
// with a user (or tool) message. Throws nibble::Error for invalid messages
// (a developer message without content, malformed tools JSON, tool-call
// arguments that are JSON but not an object, ...).
std::string encode_dsv4_chat(std::span<const ChatMessage> messages, const ChatEncodeOptions& options);

// Parses the text generated after a prompt (the prompt itself excluded):
// "reasoning</think>content<｜end▁of▁sentence｜>" in thinking mode,
// "content<｜end▁of▁sentence｜>" in chat mode, content optionally followed by
// DSML tool calls. With require_end false a text cut off before EOS (or
// before </think>) is accepted and finished is false. Malformed text (bad
// DSML, text after the calls, special tokens inside content) throws
// nibble::Error.
ParsedCompletion parse_dsv4_completion(std::string_view text, ThinkingMode mode, bool require_end = true);

}  // namespace nibble
