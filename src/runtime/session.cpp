#include "runtime/session.h"

#include "util/error.h"

namespace nibble {

Session::Session(const Model& model) : model_(model), state_(model.new_state()) {}

std::vector<float> Session::prefill(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) fail("prefill: the prompt has no tokens");
  const int64_t rows = all_logits ? int64_t(tokens.size()) : 1;
  std::vector<float> logits(size_t(rows * model_.vocab_size()));
  model_.forward(*state_, tokens, logits.data(), all_logits);
  return logits;
}

std::vector<float> Session::decode(int32_t token) {
  std::vector<float> logits(size_t(model_.vocab_size()));
  const int32_t one[1] = {token};
  model_.forward(*state_, std::span<const int32_t>(one, 1), logits.data(), false);
  return logits;
}

int32_t Session::prefill_drawn(std::span<const int32_t> tokens, const DrawParams& draw) {
  if (tokens.empty()) fail("prefill: the prompt has no tokens");
  int32_t id = -1;
  SeqStep s;
  s.state = state_.get();
  s.tokens = tokens;
  s.rows = LogitRows::last;
  s.draw = &draw;
  s.drawn = &id;
  model_.step(std::span<const SeqStep>(&s, 1));
  return id;
}

int32_t Session::decode_drawn(int32_t token, const DrawParams& draw) {
  const int32_t one[1] = {token};
  return prefill_drawn(std::span<const int32_t>(one, 1), draw);
}

void Session::reset() { state_ = model_.new_state(); }

}  // namespace nibble
