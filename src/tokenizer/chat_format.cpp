#include "tokenizer/chat_format.h"

#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_harmony.h"
#include "tokenizer/harmony_reply.h"
#include "util/error.h"

namespace nibble {
namespace {

class Dsv4Format : public ChatFormat {
 public:
  explicit Dsv4Format(TokenizeFn tokenize) : tokenize_(std::move(tokenize)) {}
  ChatFormatKind kind() const override { return ChatFormatKind::DeepSeekV4; }
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatOptions& o) const override {
    ChatEncodeOptions eo;
    eo.mode = o.mode;
    eo.effort = o.effort;
    // DeepSeek's prompt is text with its markers written out (BOS included).
    return tokenize_(encode_dsv4_chat(messages, eo), /*allow_special=*/true);
  }
  ParsedCompletion parse(std::string_view reply, const ChatOptions& o) const override {
    return parse_dsv4_completion(reply, o.mode, /*require_end=*/false);
  }
  bool reasons(const ChatOptions& o) const override { return o.mode == ThinkingMode::Thinking; }
  std::vector<int32_t> stop_tokens() const override { return {}; }  // EOS is the model's own

 private:
  TokenizeFn tokenize_;
};

class HarmonyFormat : public ChatFormat {
 public:
  explicit HarmonyFormat(TokenizeFn tokenize) : tokenize_(std::move(tokenize)) {
    for (const char* t : {"<|return|>", "<|call|>"}) {
      const auto id = tokenize_(t, /*allow_special=*/true);
      if (id.size() != 1) fail("harmony chat format: the tokenizer has no token ", t);
      stops_.push_back(id[0]);
    }
  }
  ChatFormatKind kind() const override { return ChatFormatKind::Harmony; }
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatOptions& o) const override {
    HarmonyOptions ho;
    ho.effort = o.effort;
    ho.date = o.date;
    return encode_harmony_chat(messages, ho, tokenize_);
  }
  ParsedCompletion parse(std::string_view reply, const ChatOptions&) const override {
    return parse_harmony_completion(reply);
  }
  bool reasons(const ChatOptions&) const override { return true; }
  std::vector<int32_t> stop_tokens() const override { return stops_; }

 private:
  TokenizeFn tokenize_;
  std::vector<int32_t> stops_;
};

}  // namespace

const char* chat_format_name(ChatFormatKind kind) {
  return kind == ChatFormatKind::Harmony ? "harmony" : "deepseek-v4";
}

ChatFormatKind detect_chat_format(const std::string& architecture, const TokenizeFn& tokenize) {
  if (architecture == "GptOssForCausalLM") return ChatFormatKind::Harmony;
  if (architecture == "DeepseekV4ForCausalLM") return ChatFormatKind::DeepSeekV4;
  // Unknown architecture: harmony's markers are single special tokens only
  // in a harmony tokenizer.
  if (tokenize && tokenize("<|channel|>", true).size() == 1 && tokenize("<|message|>", true).size() == 1)
    return ChatFormatKind::Harmony;
  return ChatFormatKind::DeepSeekV4;
}

std::unique_ptr<ChatFormat> make_chat_format(ChatFormatKind kind, TokenizeFn tokenize) {
  if (kind == ChatFormatKind::Harmony) return std::make_unique<HarmonyFormat>(std::move(tokenize));
  return std::make_unique<Dsv4Format>(std::move(tokenize));
}

}  // namespace nibble
