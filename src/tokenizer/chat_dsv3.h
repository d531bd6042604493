// DeepSeek-V3's chat format: messages to prompt text as the chat template of
// deepseek-ai/DeepSeek-V3's tokenizer_config.json (the December 2024
// release) renders them, and a reply's text back to an assistant message.
// tools/gen_dsv3_tok_fixtures.py renders that template with jinja2 for the
// fixtures; this file writes the same text natively, quirks included:
//
//   BOS SYSTEM[\n\nSYSTEM2..]                      (every system message, first)
//   <｜User｜>USER
//   <｜Assistant｜>CONTENT<｜end▁of▁sentence｜>
//   <｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//   ```json\nARGS\n```<｜tool▁call▁end｜>[\n<｜tool▁call▁begin｜>..<｜tool▁call▁end｜>
//   <｜tool▁calls▁end｜><｜end▁of▁sentence｜>]
//   <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT<｜tool▁output▁end｜>
//   [\n<｜tool▁output▁begin｜>..]<｜tool▁outputs▁end｜>
//   <｜Assistant｜>                                 (generation prompt, not after tool results)
//
// The template's state is kept as it keeps it: "first call" and "first
// output" are set once per conversation, never reset, so a later tool-call
// turn starts "\n<｜tool▁call▁begin｜>" without <｜Assistant｜>, and
// <｜tool▁calls▁end｜><｜end▁of▁sentence｜> follows every call but the first
// of the conversation (a single call has none). An assistant message with
// both content and calls renders its content only (the template tests
// content, not calls). After tool results the prompt ends
// <｜tool▁outputs▁end｜> with no <｜Assistant｜>. Tools are not rendered
// (V3's template has no tool definitions); a developer message counts as a
// system one (the template has no such role). Reasoning is dropped.
//
// The prompt is encoded with special tokens allowed (it carries BOS).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tokenizer/chat_message.h"

namespace nibble {

std::string encode_dsv3_chat(std::span<const ChatMessage> messages);

// Parses the text generated after the prompt: content, optionally the
// calls <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME
// \n```json\nARGS\n```<｜tool▁call▁end｜>..<｜tool▁calls▁end｜>, then
// <｜end▁of▁sentence｜>. With require_end false a text cut off is accepted
// (finished false; a call cut off is left out). Malformed calls throw.
ParsedCompletion parse_dsv3_completion(std::string_view text, bool require_end = true);

}  // namespace nibble
