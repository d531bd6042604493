// The model interface every architecture implements. A Model is immutable
// after load (weights bound to kernels, config parsed); everything that
// changes while a sequence is processed lives in a ModelState, so one Model
// serves many sequences. One forward step (Model::step) takes a batch of
// sequences, each with its own new tokens at its own position: a prefill
// chunk for some, one decode token for others, in any mix. A sequence's
// logits are bit-identical whatever else is in the step and however its
// tokens were split into steps. States can be forked (an independent copy)
// and truncated (back to an earlier length, exactly as if the later tokens
// had never been fed). runtime/session.h wraps one sequence into the
// prefill/decode API; include/nibble/engine.h is the public face of it all.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/plan.h"
#include "kernels/token_draw.h"

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
  // Tokens a state can be truncated back by without refeeding its prefix
  // (speculative decoding rejects at most its drafts): the window caches keep
  // this many rows more. Deeper truncations refeed the kept prefix.
  int64_t rollback_tokens = 16;
  // Time every phase of every step and print the table when the model is
  // destroyed (--profile; model/forward_profile.h).
  bool profile = false;
  // Binding runs check_weight_codes on every weight matrix (NaN scale codes
  // would be garbage on the SIMD kernels); true skips it (--no-check-weights).
  bool skip_weight_check = false;
  // On a GPU, decode steps run as CUDA graphs (model/cuda_step_graph.h);
  // false launches every kernel by itself (--no-cuda-graphs).
  bool cuda_graphs = true;
  // Called as weight matrices are bound and checked: bytes bound so far and
  // the checkpoint's weight bytes in all (a progress bar for large models).
  std::function<void(uint64_t done, uint64_t total)> on_progress;
  // On a GPU, called as the weights are copied there at load: bytes done
  // and in all (Backend::place_weights).
  std::function<void(uint64_t done, uint64_t total)> on_upload_progress;
};

// Per-sequence state: caches and position. Created by Model::new_state().
class ModelState {
 public:
  virtual ~ModelState() = default;
  // Tokens consumed so far (the position of the next token).
  virtual int64_t position() const = 0;
  // The earliest position Model::truncate reaches without refeeding tokens.
  virtual int64_t truncate_floor() const = 0;
  // Memory the state holds (caches, host or device; kept rows; token history).
  virtual uint64_t memory_bytes() const = 0;
  // The model that made it: a model refuses states it did not make.
  const void* owner() const { return owner_; }

 protected:
  const void* owner_ = nullptr;  // set by the model's new_state / new_draft_state
};

// `s` as a state of type S made by `owner`, or null (another model's state,
// or another kind of state of this one: the main one and the draft one).
template <class S>
S* owned_state(const ModelState& s, const void* owner) {
  auto* st = dynamic_cast<const S*>(&s);
  return st && st->owner() == owner ? const_cast<S*>(st) : nullptr;
}

// Which logits one sequence of a step wants.
enum class LogitRows { none, last, all };

// What a step read, for benchmarks (Model::step with stats).
struct StepStats {
  int64_t tokens = 0;            // fed, over all sequences
  int64_t sub_steps = 0;         // forwards the step was split into (token budget)
  uint64_t weight_bytes = 0;     // weights read: every matrix once per forward, routed experts once per distinct pick
  int64_t distinct_experts = 0;  // routed experts read, summed over layers and forwards
};

// One sequence's share of a forward step.
struct SeqStep {
  ModelState* state = nullptr;
  std::span<const int32_t> tokens;      // fed at state->position(); may be empty
  LogitRows rows = LogitRows::last;
  float* logits = nullptr;              // [1 or tokens.size()][vocab] per `rows`
  int64_t id = -1;                      // the caller's name for it, used in messages
  // The main model's state that its draft layer (multi-token prediction)
  // reads, of tokens [hidden_first, tokens.size()):
  // [tokens.size() - hidden_first][Model::hidden_width()]. DeepSeek-V4: the
  // hc_mult residual streams before hc_head; DeepSeek-V3: the final norm's
  // output (lm_head's input). Null: not wanted.
  float* hidden = nullptr;
  int64_t hidden_first = 0;
  // Instead of logits (rows must be `last`, logits null): the next token
  // drawn from the last row's logits where they are computed (a GPU keeps
  // them; kernels/token_draw.h's rule), so that only the id crosses to the
  // host. Null: logits into `logits`.
  const DrawParams* draw = nullptr;
  int32_t* drawn = nullptr;
};

// One sequence's share of a draft step (Model::draft_step): the model's
// multi-token-prediction layer at the draft state's position. Row t reads the
// residual state `hidden` of some position p (the main model's, or the draft
// layer's own output when drafts are chained) and the token at p + 1, and
// predicts the token at p + 2.
struct DraftStep {
  ModelState* state = nullptr;          // from Model::new_draft_state()
  std::span<const int32_t> tokens;      // [n]: the token after each row's position
  const float* hidden = nullptr;        // [n][hidden_width()]
  LogitRows rows = LogitRows::last;
  float* logits = nullptr;              // [1 or n][vocab] per `rows`
  // The draft layer's own residual state (its input to its head) of the last
  // row: [hidden_width()], the `hidden` of the next chained draft. May be null.
  float* hidden_out = nullptr;
  int64_t id = -1;                      // the caller's name for it, used in messages
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
  // An independent copy of `state` (costs a copy of its memory_bytes()).
  virtual std::unique_ptr<ModelState> fork(const ModelState& state) const = 0;
  // Back to `position` (0 <= position <= state.position()), exactly as if the
  // later tokens had never been fed. Free down to truncate_floor(); below it
  // the kept prefix is fed again (a prefill of `position` tokens).
  virtual void truncate(ModelState& state, int64_t position) const = 0;

  // One forward step over every sequence of `batch`: each feeds its tokens
  // at its position and advances. Linear layers, the router and the MoE run
  // once over all the step's tokens; attention per sequence on its own
  // state. Steps of more than step_token_budget() tokens are split into
  // several (same logits). One step runs at a time per model (calls from
  // several threads are serialised). Throws nibble::Error naming the
  // sequence (SeqStep::id) and the value for: a state listed twice, of
  // another model, or null; a token id outside the vocabulary; tokens that
  // would run past max_context(); logits wanted of no token or without a
  // buffer. Every input is checked before anything runs, so on such an error
  // no state has changed.
  // With `stats`: also counts what it read (routes each layer's tokens a
  // second time to count distinct experts, so time it without).
  virtual void step(std::span<const SeqStep> batch, StepStats* stats) const = 0;
  void step(std::span<const SeqStep> batch) const { step(batch, nullptr); }
  // Most tokens one step processes at once (bounds activation memory).
  virtual int64_t step_token_budget() const = 0;

  // Width of one token's SeqStep::hidden / DraftStep::hidden row.
  virtual int64_t hidden_width() const = 0;
  // Whether the checkpoint carries a draft layer (DeepSeek-V4: mtp.0.*) that
  // draft_step() runs; when not, draft_unavailable() says why (for `explain`
  // and for the error when speculation was asked for).
  virtual bool has_draft() const = 0;
  virtual std::string draft_unavailable() const = 0;
  // What the backend reports of the steps so far (Backend::report; the CUDA
  // backend's step graphs); empty when nothing.
  virtual std::string backend_report() const { return {}; }
  // Past rows the draft layer reads (its attention window): feeding it the
  // last draft_context() rows of a prompt gives it all the context it uses.
  // max_context() for a full-attention layer (DeepSeek-V3's): every row.
  virtual int64_t draft_context() const = 0;
  // A draft layer's own per-sequence state (its attention window or cache).
  // Model::fork and Model::truncate take it like a main state; its position
  // counts the rows fed, which may start at any main position (RoPE makes
  // attention depend on relative positions only).
  virtual std::unique_ptr<ModelState> new_draft_state() const = 0;
  // One forward of the draft layer over every entry of `batch`. Checks as
  // step() does (and a state of the wrong kind, a missing hidden) first.
  virtual void draft_step(std::span<const DraftStep> batch) const = 0;

  // One sequence: feeds `tokens` at state.position(). When `logits` is not
  // null it receives f32 logits: [tokens.size()][vocab] if all_logits, else
  // [vocab] for the last token only.
  void forward(ModelState& state, std::span<const int32_t> tokens, float* logits, bool all_logits) const {
    SeqStep s;
    s.state = &state;
    s.tokens = tokens;
    s.rows = !logits || tokens.empty() ? LogitRows::none : all_logits ? LogitRows::all : LogitRows::last;
    s.logits = logits;
    step(std::span<const SeqStep>(&s, 1));
  }
};

}  // namespace nibble
