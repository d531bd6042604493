#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace nibble {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::stop_token: return "stop_token";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::callback: return "callback";
    case StopReason::context_full: return "context_full";
  }
  return "?";
}

GenerateResult generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token) {
  if (options.max_new_tokens < 0) fail("--max-tokens must be >= 0, got ", options.max_new_tokens);
  std::vector<int64_t> stops = options.stop_tokens;
  if (options.use_model_eos)
    for (int64_t e : session.model().eos_token_ids()) stops.push_back(e);
  Sampler sampler(options.sampler);
  using Clock = std::chrono::steady_clock;

  const int64_t context = session.model().max_context();
  if (int64_t(prompt.size()) > context - session.position()) {
    if (session.position() == 0)
      fail("the prompt has ", prompt.size(), " tokens but the model's context holds ", context,
           " (max_position_embeddings)");
    fail("the prompt has ", prompt.size(), " tokens but only ", context - session.position(), " of the model's ",
         context, "-token context are left (", session.position(), " already in the session)");
  }
  GenerateResult r;
  r.prompt_tokens = int64_t(prompt.size());
  // Without penalties or an observer nothing needs the logits here: the
  // model draws each token where it computes them (on a GPU only the id
  // crosses), with the sampler's own settings and stream, so the tokens
  // are the same either way.
  const bool drawn = sampler.draws_on_backend();
  int32_t next_drawn = -1;
  auto t0 = Clock::now();
  std::vector<float> logits;
  if (drawn) next_drawn = session.prefill_drawn(prompt, sampler.next_draw());
  else logits = session.prefill(prompt);
  r.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  auto t1 = Clock::now();
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    if (i > 0) {
      if (session.position() >= context) {  // no room to feed the last token
        r.reason = StopReason::context_full;
        break;
      }
      if (drawn) next_drawn = session.decode_drawn(r.tokens.back(), sampler.next_draw());
      else logits = session.decode(r.tokens.back());
    }
    int32_t next = next_drawn;
    if (drawn) sampler.record(next);
    else next = sampler.sample(logits.data(), session.vocab_size());
    r.tokens.push_back(next);
    if (std::find(stops.begin(), stops.end(), int64_t(next)) != stops.end()) {
      r.reason = StopReason::stop_token;
      break;
    }
    if (on_token && !on_token(next)) {
      r.reason = StopReason::callback;
      break;
    }
  }
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

}  // namespace nibble
