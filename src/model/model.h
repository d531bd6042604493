// The model interface every architecture implements. A Model is immutable
// after load (weights bound to kernels, config parsed); everything that
// changes while a sequence is processed lives in a ModelState, so one Model
// can serve several sequences. runtime/session.h wraps the two into the
// prefill/decode API the CLI uses.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/plan.h"

namespace nibble {

class Checkpoint;
class ThreadPool;

// How a model is loaded: which device to plan for and which kernels to force.
struct LoadOptions {
  std::string device = "host";  // named_device(): host, cpu-avx2, ...
  int threads = 0;              // <= 0: all hardware threads
  double bandwidth_gbps = 0;    // > 0: skip the bandwidth measurement and assume this
  PlanOptions plan;             // --moe-backend / --linear-backend overrides
  // Longest run of tokens one forward step processes; longer prompts are fed
  // in chunks of this size, which bounds activation memory (same logits).
  int64_t max_chunk_tokens = 256;
  // Binding runs check_weight_codes on every weight matrix (NaN scale codes
  // would be garbage on the SIMD kernels); true skips it (--no-check-weights).
  bool skip_weight_check = false;
};

// Per-sequence state: caches and position. Created by Model::new_state().
class ModelState {
 public:
  virtual ~ModelState() = default;
  // Tokens consumed so far (the position of the next token).
  virtual int64_t position() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const std::string& architecture() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_token_id() const = 0;            // -1 when the config has none
  virtual const std::vector<int64_t>& eos_token_ids() const = 0;
  // The most tokens one sequence can hold (config.json's max_position_embeddings).
  virtual int64_t max_context() const = 0;
  // The plan the model's kernels were bound from (what `explain` shows).
  virtual const Plan& plan() const = 0;

  virtual std::unique_ptr<ModelState> new_state() const = 0;

  // Feeds `tokens` at state.position() and advances the state. One forward
  // runs at a time per model (calls from several threads are serialised). When
  // `logits` is not null it receives f32 logits: [tokens.size()][vocab] if
  // all_logits, else [vocab] for the last token only. Throws nibble::Error
  // for a token id outside the vocabulary (naming its index), tokens that
  // would run past max_context(), or a state of another model; the state is
  // unchanged when it throws on input checks.
  virtual void forward(ModelState& state, std::span<const int32_t> tokens, float* logits,
                       bool all_logits) const = 0;
};

}  // namespace nibble
