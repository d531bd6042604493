// The request bodies of the generation endpoints, parsed and checked before
// anything touches the engine. Strict on purpose: an unknown field, a wrong
// type or an impossible value is a 400 naming the field (ApiError), so a
// client learns at once that a setting it relies on is not honoured. Fields
// OpenAI defines that nibble does not implement yet are accepted only at
// their neutral value (echo false, no suffix, no response_format).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nibble/engine.h"
#include "tokenizer/chat_dsv4.h"

namespace nibble::server {

// The deepest JSON nesting a body may have (checked before parsing, so a
// hostile "[[[[..." costs one linear scan and no recursion).
inline constexpr int kMaxJsonDepth = 32;
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopLength = 256;
inline constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's bound
inline constexpr int64_t kMaxChoices = 16;      // n

// tool_choice: "auto" (the model decides), "none" (no tools offered),
// "required" (a call is forced), or one named function (forced).
enum class ToolChoice { Auto, None, Required, Named };

// What /v1/completions and /v1/chat/completions share.
struct GenerationRequest {
  std::string model;                   // "" when not given
  // /v1/completions: the prompt as text, or as token ids (prompt_is_ids).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // /v1/chat/completions: the conversation.
  std::vector<ChatMessage> messages;

  std::optional<int64_t> max_tokens;   // max_completion_tokens wins over max_tokens
  SamplingParams sampling;             // the defaults given to the parser, then the request's fields
  bool seed_given = false;             // else the server draws one per request
  std::vector<std::string> stop;       // stop strings, at most kMaxStopStrings
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  int64_t n = 1;                       // choices, from one prefill
  // Log-probabilities of the sampled tokens and of the `top_logprobs` most
  // likely ones (chat: logprobs true + top_logprobs; completions: logprobs N).
  bool logprobs = false;
  int64_t top_logprobs = 0;

  // Chat only.
  bool thinking = false;               // chat_template_kwargs.thinking, reasoning_effort, thinking.type
  ReasoningEffort effort = ReasoningEffort::Default;
  std::string tools;                   // the "tools" array as JSON text ("" = none)
  std::vector<std::string> tool_names; // their function names, in order
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;        // ToolChoice::Named
  bool parallel_tool_calls = true;     // false: only the first call is kept
};

// Throw ApiError (400) for anything malformed. `vocab_size` bounds token ids;
// `defaults` are the sampling settings a request does not give (the
// model's generation_config.json, as vLLM and `nibble run` use it).
GenerationRequest parse_completion_request(std::string_view body, int64_t vocab_size,
                                           const SamplingParams& defaults = {});
GenerationRequest parse_chat_request(std::string_view body, const SamplingParams& defaults = {});

// POST /tokenize {"content"|"prompt": text, "add_special": bool}.
struct TokenizeRequest {
  std::string model;
  std::string content;
  bool add_special = false;            // prepend BOS
};
TokenizeRequest parse_tokenize_request(std::string_view body);

// POST /detokenize {"tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(std::string_view body, int64_t vocab_size);

}  // namespace nibble::server
