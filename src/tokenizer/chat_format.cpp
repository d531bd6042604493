#include "tokenizer/chat_format.h"

#include "tokenizer/chat_dsv3.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_harmony.h"
#include "tokenizer/chat_kimi.h"
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

class KimiFormat : public ChatFormat {
 public:
  explicit KimiFormat(TokenizeFn tokenize) : tokenize_(std::move(tokenize)) {
    const auto id = tokenize_(std::string(kKimiImEnd), /*allow_special=*/true);
    if (id.size() != 1) fail("Kimi chat format: the tokenizer has no token ", kKimiImEnd);
    stops_.push_back(id[0]);
  }
  ChatFormatKind kind() const override { return ChatFormatKind::Kimi; }
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatOptions&) const override {
    return tokenize_(encode_kimi_chat(messages), /*allow_special=*/true);
  }
  ParsedCompletion parse(std::string_view reply, const ChatOptions&) const override {
    return parse_kimi_completion(reply, /*require_end=*/false);
  }
  bool reasons(const ChatOptions&) const override { return false; }
  // <|im_end|> ends K2's turns; its config's eos_token_id is [EOS].
  std::vector<int32_t> stop_tokens() const override { return stops_; }

 private:
  TokenizeFn tokenize_;
  std::vector<int32_t> stops_;
};

class Dsv3Format : public ChatFormat {
 public:
  explicit Dsv3Format(TokenizeFn tokenize) : tokenize_(std::move(tokenize)) {}
  ChatFormatKind kind() const override { return ChatFormatKind::DeepSeekV3; }
  std::vector<int32_t> encode(std::span<const ChatMessage> messages, const ChatOptions&) const override {
    return tokenize_(encode_dsv3_chat(messages), /*allow_special=*/true);  // the text carries BOS
  }
  ParsedCompletion parse(std::string_view reply, const ChatOptions&) const override {
    return parse_dsv3_completion(reply, /*require_end=*/false);
  }
  bool reasons(const ChatOptions&) const override { return false; }
  std::vector<int32_t> stop_tokens() const override { return {}; }  // EOS is the model's own

 private:
  TokenizeFn tokenize_;
};

bool single_tokens(const TokenizeFn& tokenize, std::initializer_list<const char*> texts) {
  if (!tokenize) return false;
  for (const char* t : texts)
    if (tokenize(t, true).size() != 1) return false;
  return true;
}

}  // namespace

const char* chat_format_name(ChatFormatKind kind) {
  switch (kind) {
    case ChatFormatKind::Harmony: return "harmony";
    case ChatFormatKind::Kimi: return "kimi-k2";
    case ChatFormatKind::DeepSeekV3: return "deepseek-v3";
    case ChatFormatKind::DeepSeekV4: break;
  }
  return "deepseek-v4";
}

ChatFormatKind detect_chat_format(const std::string& architecture, const TokenizeFn& tokenize) {
  if (architecture == "GptOssForCausalLM") return ChatFormatKind::Harmony;
  if (architecture == "DeepseekV4ForCausalLM") return ChatFormatKind::DeepSeekV4;
  // Other architectures (DeepseekV3ForCausalLM is DeepSeek-V3's and Kimi
  // K2's): the markers are single special tokens only in their tokenizers.
  if (single_tokens(tokenize, {"<|channel|>", "<|message|>"})) return ChatFormatKind::Harmony;
  if (single_tokens(tokenize, {"<|im_assistant|>", "<|im_middle|>"})) return ChatFormatKind::Kimi;
  if (architecture == "DeepseekV3ForCausalLM") return ChatFormatKind::DeepSeekV3;
  return ChatFormatKind::DeepSeekV4;
}

std::unique_ptr<ChatFormat> make_chat_format(ChatFormatKind kind, TokenizeFn tokenize) {
  if (kind == ChatFormatKind::Harmony) return std::make_unique<HarmonyFormat>(std::move(tokenize));
  if (kind == ChatFormatKind::Kimi) return std::make_unique<KimiFormat>(std::move(tokenize));
  if (kind == ChatFormatKind::DeepSeekV3) return std::make_unique<Dsv3Format>(std::move(tokenize));
  return std::make_unique<Dsv4Format>(std::move(tokenize));
}

}  // namespace nibble
