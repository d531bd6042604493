// Kimi K2's chat format: messages to prompt text, and a reply's text back to
// an assistant message. The reference is the chat template of
// moonshotai/Kimi-K2-Instruct's tokenizer_config.json (as llama.cpp's tests
// copy it; tools/gen_kimi_tokenizer.py renders it with jinja2 under
// transformers' settings for the fixtures), written out natively:
//
//   [<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  TOOLS<|im_end|>]
//   [<|im_system|>system<|im_middle|>You are Kimi, ...<|im_end|>]   (first message not system)
//   <|im_system|>system<|im_middle|>\nSYSTEM<|im_end|>
//   <|im_user|>user<|im_middle|>USER<|im_end|>
//   <|im_assistant|>assistant<|im_middle|>CONTENT[CALLS]<|im_end|>
//   <|im_system|>tool<|im_middle|>\n## Return of ID\n    RESULT<|im_end|>
//   <|im_assistant|>assistant<|im_middle|>                          (generation prompt)
//
// The "\n" after a system-role <|im_middle|> and the indentation before
// "# Tools" and a tool result are what the template's whitespace renders
// (trim_blocks and lstrip_blocks strip block tags' lines, not text lines).
// TOOLS is json.dumps(ensure_ascii=False) of the tools with every object's
// keys sorted (tokenization_kimi.py's apply_chat_template deep-sorts them).
// CALLS: <|tool_calls_section_begin|>, then per call
// <|tool_call_begin|>ID<|tool_call_argument_begin|>ARGUMENTS<|tool_call_end|>,
// then <|tool_calls_section_end|>; ID is Kimi's "functions.NAME:INDEX".
// Roles other than user and assistant render as <|im_system|>ROLE, as the
// template's else branch does. Reasoning is not part of K2-Instruct's format
// and is dropped.
//
// The prompt is encoded with special tokens allowed, no BOS (the template
// writes none).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tokenizer/chat_message.h"

namespace nibble {

inline constexpr std::string_view kKimiImEnd = "<|im_end|>";

// The generation prompt for `messages` (ending with a user or tool message).
// Throws nibble::Error for malformed tools JSON (naming the message).
std::string encode_kimi_chat(std::span<const ChatMessage> messages);

// Parses the text generated after the prompt: content, optionally followed
// by a tool-call section, then <|im_end|> (or [EOS]). Whitespace around
// calls is allowed; a call's name is its id without "functions." and the
// ":INDEX" suffix. With require_end false a text cut off early is accepted
// (finished false; a call cut off is left out). Malformed sections throw.
ParsedCompletion parse_kimi_completion(std::string_view text, bool require_end = true);

}  // namespace nibble
