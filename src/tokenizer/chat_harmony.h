// gpt-oss's chat format, harmony (docs/chat_formats.md): messages to prompt
// tokens, exactly as openai-harmony's render_conversation_for_completion
// renders them, and a reply's text back to reasoning / content / tool calls.
//
//   <|start|>system<|message|>You are ChatGPT, ...Reasoning: medium ...<|end|>
//   <|start|>developer<|message|># Instructions\n\n...# Tools ...<|end|>
//   <|start|>user<|message|>Hi<|end|>
//   <|start|>assistant<|channel|>analysis<|message|>thinking<|end|>
//   <|start|>assistant<|channel|>final<|message|>answer<|end|>
//   <|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{..}<|call|>
//   <|start|>functions.f to=assistant<|channel|>commentary<|message|>result<|end|>
//   <|start|>assistant                                   (the generation prompt)
//
// OpenAI messages map to harmony messages as follows:
//  - the system message is always harmony's (model identity, knowledge
//    cutoff, optional date, reasoning effort, the channels);
//  - the contents of the system and developer messages, joined by a blank
//    line, are the developer message's "# Instructions"; their tools
//    (OpenAI's array) its "# Tools" section, each JSON schema written as
//    harmony's TypeScript;
//  - assistant: reasoning_content -> analysis; content -> final, or a
//    commentary preamble when the turn makes tool calls; each call ->
//    commentary to=functions.NAME with <|constrain|>json;
//  - tool: a message from functions.NAME (the call its tool_call_id answers).
// Like openai-harmony, when the last assistant message is a final answer
// the analysis messages before the first final answer are dropped.
//
// Every text piece is encoded on its own with special tokens off (harmony
// tokenizes role, recipient, channel and content separately), so the ids
// are not Tokenizer::encode of the rendered text, and content can never
// forge a marker.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/chat_message.h"

namespace nibble {

class Tokenizer;

struct HarmonyOptions {
  ReasoningEffort effort = ReasoningEffort::Default;  // Default: medium; Max: high
  std::string date;                                   // "Current date: DATE" when not empty (YYYY-MM-DD)
};

// The generation prompt's ids. Throws nibble::Error for a tokenizer without
// the harmony tokens, malformed tools JSON, or a tool message whose
// tool_call_id answers no earlier call.
std::vector<int32_t> encode_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options,
                                         const TokenizeFn& tokenize);
std::vector<int32_t> encode_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options,
                                         const Tokenizer& tokenizer);

// The same prompt as text (markers written out): what the ids decode to.
std::string render_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options);

// OpenAI's function-tool JSON schema as harmony's TypeScript type (exposed
// for tests). `indent` prefixes nested lines.
std::string harmony_schema_typescript(const std::string& schema_json, const std::string& indent = "");

}  // namespace nibble
