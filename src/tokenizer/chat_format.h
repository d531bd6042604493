// The chat format of a model, chosen once from its checkpoint, so that
// `nibble chat`, `run --chat` and `serve` encode prompts and read replies
// without per-format code at each call site:
//   DeepSeek-V4  - chat_dsv4.h: a prompt text (BOS, <｜User｜>, <think>)
//   harmony      - chat_harmony.h: gpt-oss's <|start|>role<|channel|>..
//   Kimi K2      - chat_kimi.h: <|im_user|>user<|im_middle|>..<|im_end|>
//   DeepSeek-V3  - chat_dsv3.h: BOS, <｜User｜>, <｜Assistant｜>, V3's tool markers
// The choice (chat_format_for): config.json's architecture when it names
// one format (GptOssForCausalLM is harmony), else the tokenizer's special
// tokens (harmony's <|channel|> and <|message|>, Kimi's <|im_assistant|> and
// <|im_middle|>: Kimi K2 names DeepseekV3ForCausalLM too), else DeepSeek-V3
// for DeepseekV3ForCausalLM and DeepSeek-V4 for the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_message.h"

namespace nibble {

enum class ChatFormatKind { DeepSeekV4, Harmony, Kimi, DeepSeekV3 };

// "deepseek-v4" | "harmony" | "kimi-k2" | "deepseek-v3".
const char* chat_format_name(ChatFormatKind kind);

struct ChatOptions {
  ThinkingMode mode = ThinkingMode::Chat;  // DeepSeek-V4; harmony always reasons (analysis channel)
  ReasoningEffort effort = ReasoningEffort::Default;
  std::string date;                        // harmony: "Current date:" (YYYY-MM-DD), "" = none
};

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual ChatFormatKind kind() const = 0;
  const char* name() const { return chat_format_name(kind()); }

  // The generation prompt's ids for a conversation ending with a user or
  // tool message. Throws nibble::Error for messages the format refuses.
  virtual std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatOptions& options) const = 0;

  // A generated reply's text (without the prompt) as an assistant message's
  // parts; a reply cut off early is accepted (finished false). Throws for
  // text that is not the format's.
  virtual ParsedCompletion parse(std::string_view reply, const ChatOptions& options) const = 0;

  // Whether the reply opens with reasoning under these options.
  virtual bool reasons(const ChatOptions& options) const = 0;

  // Token ids that end a reply, besides the model's own end-of-sequence ids
  // (harmony: <|return|> and <|call|>).
  virtual std::vector<int32_t> stop_tokens() const = 0;
};

// `architecture`: config.json's architectures[0] ("" when unknown).
// `tokenize` must outlive the format.
ChatFormatKind detect_chat_format(const std::string& architecture, const TokenizeFn& tokenize);
std::unique_ptr<ChatFormat> make_chat_format(ChatFormatKind kind, TokenizeFn tokenize);
inline std::unique_ptr<ChatFormat> chat_format_for(const std::string& architecture, TokenizeFn tokenize) {
  // Detected first: as one call's arguments, the move into make_chat_format's
  // parameter may happen before detection reads `tokenize` (GCC does so).
  const ChatFormatKind kind = detect_chat_format(architecture, tokenize);
  return make_chat_format(kind, std::move(tokenize));
}

}  // namespace nibble
