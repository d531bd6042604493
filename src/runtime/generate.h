// The generation loop: prefill the prompt, then sample and decode one token
// at a time until a stop token, the token budget, or the caller says stop.
// Tokens stream out through a callback as they are sampled; timings come
// back so the CLI can print prefill and decode speed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace nibble {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  // Generation ends after sampling one of these (it is not passed to on_token).
  // Empty: the model's eos_token_ids.
  std::vector<int64_t> stop_tokens;
  bool use_model_eos = true;        // false: only stop_tokens (possibly none) stop
  SamplerConfig sampler;            // temperature 0 = greedy
};

// context_full: the sequence reached the model's max_context().
enum class StopReason { stop_token, max_tokens, callback, context_full };
const char* stop_reason_name(StopReason r);  // "stop_token", "max_tokens", "callback", "context_full"

struct GenerateResult {
  std::vector<int32_t> tokens;      // generated tokens, the stop token included if one ended it
  StopReason reason = StopReason::max_tokens;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;       // prompt forward
  double decode_seconds = 0;        // every later forward
};

// The prompt is always fed (also with max_new_tokens 0); a prompt that does
// not fit in the model's context is an error naming both lengths, before
// anything is computed. Generation ends at the context's end. on_token(id) is
// called for each generated token except a stop token; returning false ends
// generation (reason callback). The session continues from wherever
// generation ended: the last sampled token is not fed.
GenerateResult generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token = {});

}  // namespace nibble
