// A Session is one sequence being processed by one model: the model's
// per-sequence state (caches, position) plus the prefill/decode API the
// generation loop and the CLI use. Prefilling a prompt and then decoding one
// token at a time gives the same logits as one full forward over all tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"

namespace nibble {

class Session {
 public:
  explicit Session(const Model& model);

  const Model& model() const { return model_; }
  int64_t position() const { return state_->position(); }  // tokens consumed so far
  int64_t vocab_size() const { return model_.vocab_size(); }

  // Feeds `tokens` at the current position. Returns the logits of the last
  // token [vocab], or of every token [n][vocab] when all_logits. An empty
  // prompt is an error (there is no token to predict from).
  std::vector<float> prefill(std::span<const int32_t> tokens, bool all_logits = false);

  // Feeds one token; returns its logits [vocab].
  std::vector<float> decode(int32_t token);

  // The same, drawing the next token where the logits are computed (a GPU
  // keeps them; SeqStep::draw) and returning only its id.
  int32_t prefill_drawn(std::span<const int32_t> tokens, const DrawParams& draw);
  int32_t decode_drawn(int32_t token, const DrawParams& draw);

  // Back to position 0 with empty caches.
  void reset();

  // A session over an existing state (taken over), and the state back.
  Session(const Model& model, std::unique_ptr<ModelState> state) : model_(model), state_(std::move(state)) {}
  std::unique_ptr<ModelState> release_state() { return std::move(state_); }
  // The state itself (speculative decoding runs on it directly).
  ModelState& state() { return *state_; }

 private:
  const Model& model_;
  std::unique_ptr<ModelState> state_;
};

}  // namespace nibble
