// DeepSeek-V4 (`DeepseekV4ForCausalLM`) on the CPU or a GPU (the backend
// model/device_backend.h picks for the planned device): the model and its per-sequence
// state. forward() runs dsv4.md §2 for a chunk of tokens at the state's
// position, following Hugging Face's fp32 numerics:
//   X = embed(ids) repeated over N streams                     [n, N, D]
//   for each layer: block_forward (hc + attention, hc + MoE)
//   y = norm(hc_head(X));  logits = head(y)                    [n, V]
// A step holds the tokens of several sequences: embedding, hyper-connections,
// norms, projections, MoE and head run once over all of them; attention per
// sequence (deepseek_v4_attention.h). A prompt fed at once, fed token by token
// or fed beside other sequences gives the same logits, bit for bit: the state
// (AttentionState per layer) holds exactly what later tokens read, and every
// op computes a token's result without reference to the other tokens.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "model/backend.h"
#include "model/cached_state.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/model.h"
#include "model/step_parts.h"
#include "util/thread_pool.h"

namespace nibble {

// A sequence's state: one AttentionCache per layer from the model's backend
// (model/cached_state.h).
class DeepseekV4State final : public CachedState {
  friend class DeepseekV4Model;
};

// The MTP layer's own state (deepseek_v4_mtp.cpp): one sliding-window
// attention layer. Its position counts the rows fed; row r's input is the
// residual state of main position offset + r and the token after it. It
// keeps no history of those rows, so it is never fed again: truncation stops
// at its floor.
class DeepseekV4DraftState final : public CachedState {
  friend class DeepseekV4Model;
};

class DeepseekV4Model : public Model {
 public:
  DeepseekV4Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan, const LoadOptions& options);
  ~DeepseekV4Model() override;

  const std::string& architecture() const override { return arch_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t bos_token_id() const override { return cfg_.bos_token_id; }
  const std::vector<int64_t>& eos_token_ids() const override { return cfg_.eos_token_ids; }
  int64_t max_context() const override { return cfg_.max_position; }
  const Plan& plan() const override { return plan_; }
  const DeepseekV4Config& config() const { return cfg_; }
  const Backend& backend() const { return *backend_; }  // what the forward runs on (tests, benchmarks)
  std::string backend_report() const override { return backend_->report(); }

  std::unique_ptr<ModelState> new_state() const override;
  std::unique_ptr<ModelState> fork(const ModelState& state) const override;
  void truncate(ModelState& state, int64_t position) const override;
  using Model::step;
  void step(std::span<const SeqStep> batch, StepStats* stats) const override;
  int64_t step_token_budget() const override { return max_chunk_; }

  int64_t hidden_width() const override { return cfg_.hc_mult * cfg_.hidden; }
  bool has_draft() const override { return !w_.mtp.empty(); }
  std::string draft_unavailable() const override { return w_.mtp_missing; }
  int64_t draft_context() const override { return cfg_.sliding_window; }
  std::unique_ptr<ModelState> new_draft_state() const override;
  void draft_step(std::span<const DraftStep> batch) const override;  // deepseek_v4_mtp.cpp

 private:
  // One sequence's part of a sub-step: tokens [from, from + count) of batch entry `seq`.
  using Part = StepPart<DeepseekV4State>;
  DeepseekV4State& state_of(const ModelState& s, int64_t id) const;
  // One draft sequence's part of a draft sub-step (deepseek_v4_mtp.cpp).
  using DraftPart = DraftStepPart<DeepseekV4DraftState>;
  DeepseekV4DraftState* draft_state_of(const ModelState& s) const;  // null: not a draft state of this model
  void draft_forward_parts(std::span<const DraftPart> parts) const;
  // One forward over at most max_chunk_ tokens (callers hold mu_).
  void forward_parts(std::span<const Part> parts, StepStats* stats) const;
  // The head of the main model and of the MTP layer: rows `rows` of the
  // step's streams through hc_head, the final norm and the shared head,
  // each into its caller's logits buffer out[r] [V], or drawn where a
  // buffer is null (deliver_logits; the main model's SeqStep::draw).
  void head_rows(Backend& be, const HcHeadWeights& hc_head, const std::vector<float>& norm, Tensor streams,
                 std::span<const int64_t> rows, std::span<float* const> out, std::span<const DrawParams> draws = {},
                 std::span<int32_t* const> drawn = {}) const;

  std::string arch_ = "DeepseekV4ForCausalLM";
  std::unique_ptr<Checkpoint> ck_;  // owns the memory maps every view points into
  Plan plan_;
  DeepseekV4Config cfg_;
  DeepseekV4Weights w_;
  RopeTable rope_main_, rope_compress_;
  HcShape hc_;
  AttentionShape attn_;
  int64_t max_chunk_ = 256;
  uint64_t dense_bytes_ = 0;               // per forward: every weight but the routed experts
  std::vector<uint64_t> expert_bytes_;     // [layer] one routed expert's w1 + w3 + w2
  mutable std::mutex mu_;           // a step uses pool_ and backend_ and is not reentrant
  mutable ThreadPool pool_;
  std::unique_ptr<ForwardProfile> profile_;  // LoadOptions::profile; printed when the model is destroyed
  std::unique_ptr<Backend> backend_;  // runs every op of the forward (model/device_backend.h)
};

// The registry's loader for DeepseekV4ForCausalLM.
std::unique_ptr<Model> load_deepseek_v4(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                        const LoadOptions& options);

}  // namespace nibble
