// DeepSeek-V3 (`DeepseekV3ForCausalLM`: DeepSeek-V3 / R1 and Kimi K2) on the
// backend seam: the model and its per-sequence state. One forward step over
// the tokens of several sequences follows transformers' DeepseekV3 in fp32:
//   x = embed(ids)                                                   [T, D]
//   per layer l:
//     h  = rms_norm(x, input_layernorm)
//     q  = q_b(rms_norm(q_a(h), q_a_layernorm))  or q_proj(h)         [T, H*(n+r)]
//     kv = kv_a_proj_with_mqa(h)                                      [T, C+r]
//     c  = rms_norm(kv[:, :C], kv_a_layernorm); kr = kv[:, C:]
//     rope(q's trailing r channels per head), rope(kr)               (YaRN table)
//     o  = per sequence: mla_attend(q, c, kr; its latent cache)       [T, H*v]
//          (absorbed: deepseek_v3_attention.h)
//     x += o_proj(o)
//     h  = rms_norm(x, post_attention_layernorm)
//     x += l < first_k_dense_replace ? mlp(h)
//          : experts(h; sigmoid + e_score_correction_bias, group-limited
//            top-k, norm_topk_prob, routed_scaling_factor) + shared_experts(h)
//   logits = rms_norm(x, norm) lm_head^T                             [rows, V]
// Projections, norms, router and experts run once over all the step's
// tokens; attention per sequence on its own caches. Every op computes a
// token's result without reference to the other tokens, so a sequence's
// logits do not depend on its batch or on how its prompt was chunked.
// The MTP layer (model.layers.{num_hidden_layers}) is the draft of
// speculative decoding (deepseek_v3_mtp.cpp, docs/deepseek_v3.md "The MTP
// layer"): one more decoder layer, the same layer_forward, over its own
// latent cache (DeepseekV3DraftState).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "model/backend.h"
#include "model/cached_state.h"
#include "model/deepseek_v3_config.h"
#include "model/deepseek_v3_weights.h"
#include "model/model.h"
#include "model/step_parts.h"
#include "util/thread_pool.h"

namespace nibble {

// A sequence's state: one latent cache per layer from the backend, holding
// every fed position, so truncate is a resize (free, any depth: the floor
// stays 0) and fork a copy.
class DeepseekV3State final : public CachedState {
  friend class DeepseekV3Model;
};

// The MTP layer's own state: one latent cache over every row it was fed
// (full attention, like the main layers), so truncate is a resize and fork a
// copy. Its position counts the rows fed; row r is RoPE'd at position r.
class DeepseekV3DraftState final : public CachedState {
  friend class DeepseekV3Model;
};

class DeepseekV3Model : public Model {
 public:
  DeepseekV3Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan, const LoadOptions& options);
  ~DeepseekV3Model() override;

  const std::string& architecture() const override { return arch_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t bos_token_id() const override { return cfg_.bos_token_id; }
  const std::vector<int64_t>& eos_token_ids() const override { return cfg_.eos_token_ids; }
  int64_t max_context() const override { return cfg_.max_position; }
  const Plan& plan() const override { return plan_; }
  const DeepseekV3Config& config() const { return cfg_; }
  const Dsv3Weights& weights() const { return w_; }

  std::unique_ptr<ModelState> new_state() const override;
  std::unique_ptr<ModelState> fork(const ModelState& state) const override;
  void truncate(ModelState& state, int64_t position) const override;
  using Model::step;
  void step(std::span<const SeqStep> batch, StepStats* stats) const override;
  int64_t step_token_budget() const override { return max_chunk_; }

  // SeqStep::hidden: the final norm's output rms_norm(x, norm), i.e. lm_head's
  // input, which DeepSeek-V3's MTP layer reads (docs/deepseek_v3.md).
  int64_t hidden_width() const override { return cfg_.hidden; }
  bool has_draft() const override { return !w_.mtp.empty(); }
  std::string draft_unavailable() const override;
  // Full attention: the MTP layer reads every row it was fed, so it needs
  // every row of a prompt (the runtime feeds them all; docs/speculative.md).
  int64_t draft_context() const override { return cfg_.max_position; }
  std::unique_ptr<ModelState> new_draft_state() const override;     // deepseek_v3_mtp.cpp
  void draft_step(std::span<const DraftStep> batch) const override;  // deepseek_v3_mtp.cpp

 private:
  using Part = StepPart<DeepseekV3State>;
  using DraftPart = DraftStepPart<DeepseekV3DraftState>;
  DeepseekV3State& state_of(const ModelState& s, int64_t id) const;
  DeepseekV3DraftState* draft_state_of(const ModelState& s) const;  // null: not a draft state of this model
  void forward_parts(std::span<const Part> parts, StepStats* stats) const;
  void draft_forward_parts(std::span<const DraftPart> parts) const;  // deepseek_v3_mtp.cpp
  // Work buffers of one decoder layer over n rows, allocated once per sub-step.
  struct LayerScratch {
    Tensor h, y, y2;            // [n, D] normed input, sublayer output, shared experts' output
    Tensor q, qa;               // [n, H*(nope+rope)], [n, q_lora_rank] (empty without q_lora)
    Tensor kv, latent, k_rope;  // [n, C + r], [n, C], [n, r]
    Tensor o;                   // [n, H*v]
  };
  LayerScratch alloc_layer_scratch(int64_t n) const;
  // One decoder layer (MLA attention, then the dense MLP or the MoE with its
  // shared experts) over a sub-step's rows: x [n, D], the residual stream,
  // updated in place. seqs: each sequence's consecutive rows, in order, with
  // its cache of this layer; positions [n] the RoPE position of each row.
  // The main layers and the MTP layer both run through it.
  void layer_forward(const Dsv3LayerWeights& w, const LayerScratch& s, std::span<const int64_t> positions,
                     std::span<const MlaSeq> seqs, Tensor x, StepStats* stats) const;
  // rms_norm(x[rows[r]], norm) through `head` into out[r] [V]: the main
  // model's logits (model.norm, lm_head) and the MTP layer's
  // (shared_head.norm, shared_head.head); a row with a null out[r] is drawn
  // instead (deliver_logits; the main model's SeqStep::draw).
  void head_rows(const std::vector<float>& norm, const BoundLinear& head, Tensor x, std::span<const int64_t> rows,
                 std::span<float* const> out, std::span<const DrawParams> draws = {},
                 std::span<int32_t* const> drawn = {}) const;
  // y = mlp(h): gate, up, silu * up, down; g / u are [n, width] scratch.
  void run_mlp(const Dsv3Mlp& m, Tensor h, Tensor y) const;
  // The routed experts' distinct picks for `x` (benchmarks only: routes again).
  int64_t count_distinct(const Dsv3LayerWeights& w, const float* x, int64_t n) const;

  std::string arch_ = "DeepseekV3ForCausalLM";
  std::unique_ptr<Checkpoint> ck_;  // owns the memory maps every view points into
  Plan plan_;
  DeepseekV3Config cfg_;
  Dsv3Weights w_;
  RopeTable rope_;
  MlaShape mla_;
  int64_t max_chunk_ = 256;
  uint64_t dense_bytes_ = 0;      // per forward: every weight but the routed experts
  uint64_t expert_bytes_ = 0;     // one routed expert of one layer: gate + up + down
  mutable std::mutex mu_;
  mutable ThreadPool pool_;
  std::unique_ptr<ForwardProfile> profile_;
  std::unique_ptr<Backend> backend_;
};

// The registry's loader for DeepseekV3ForCausalLM.
std::unique_ptr<Model> load_deepseek_v3(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                        const LoadOptions& options);

}  // namespace nibble
