// gpt-oss (`GptOssForCausalLM`, openai/gpt-oss-20b and -120b) on the backend
// seam: the model and its per-sequence state. One forward step over the
// tokens of several sequences follows transformers' GptOss in fp32:
//   x = embed(ids)                                                  [T, D]
//   per layer l:
//     h = rms_norm(x, input_layernorm)
//     q, k, v = h W_q^T + b_q, h W_k^T + b_k, h W_v^T + b_v         [T, H*d], [T, KV*d]
//     rope_half_split(q), rope_half_split(k)                         (YaRN table)
//     o = per sequence: gqa_attend(q, k, v; sinks, its cache,        sliding window on
//         window if layer_types[l] is sliding_attention)             sliding layers
//     x += o W_o^T + b_o
//     h = rms_norm(x, post_attention_layernorm)
//     x += moe(h)      router + bias -> top-k -> softmax over the k -> experts with
//                      biases and the clamped SwiGLU (kernels/moe.h, fused)
//   logits = rms_norm(x, norm) W_head^T                             [rows, V]
// Projections, norms, router and experts run once over all the step's
// tokens (each selected expert's weights are read once per step); attention
// runs per sequence on its own caches. Every op computes a token's result
// without reference to the other tokens, so a sequence's logits do not
// depend on its batch or on how its prompt was chunked.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "model/backend.h"
#include "model/cached_state.h"
#include "model/gpt_oss_config.h"
#include "model/gpt_oss_weights.h"
#include "model/model.h"
#include "model/step_parts.h"
#include "util/thread_pool.h"

namespace nibble {

// A sequence's state: one KV cache per layer from the backend (a full
// layer's holds every fed position; a sliding layer's a ring of the last
// window + step budget + rollback positions) and the tokens fed. Truncation
// back to the floor is free (a resize, or a ring position moved back);
// deeper, the kept prefix is fed again. A fork is a copy.
class GptOssState final : public CachedState {
  friend class GptOssModel;
};

class GptOssModel : public Model {
 public:
  GptOssModel(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan, const LoadOptions& options);
  ~GptOssModel() override;

  const std::string& architecture() const override { return arch_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t bos_token_id() const override { return cfg_.bos_token_id; }
  const std::vector<int64_t>& eos_token_ids() const override { return cfg_.eos_token_ids; }
  int64_t max_context() const override { return cfg_.max_position; }
  const Plan& plan() const override { return plan_; }
  const GptOssConfig& config() const { return cfg_; }

  std::unique_ptr<ModelState> new_state() const override;
  std::unique_ptr<ModelState> fork(const ModelState& state) const override;
  void truncate(ModelState& state, int64_t position) const override;
  using Model::step;
  void step(std::span<const SeqStep> batch, StepStats* stats) const override;
  int64_t step_token_budget() const override { return max_chunk_; }

  // The residual stream before the final norm (what SeqStep::hidden receives).
  int64_t hidden_width() const override { return cfg_.hidden; }
  // gpt-oss ships no draft (multi-token prediction) layer.
  bool has_draft() const override { return false; }
  std::string draft_unavailable() const override { return "gpt-oss has no multi-token-prediction layer"; }
  int64_t draft_context() const override { return 0; }
  std::unique_ptr<ModelState> new_draft_state() const override;
  void draft_step(std::span<const DraftStep> batch) const override;

 private:
  using Part = StepPart<GptOssState>;
  GptOssState& state_of(const ModelState& s, int64_t id) const;
  void forward_parts(std::span<const Part> parts, StepStats* stats) const;
  GqaShape layer_shape(const GptOssLayerWeights& w) const;
  // The MoE sublayer's distinct experts for `x` (benchmarks only: routes again).
  int64_t count_distinct(const GptOssLayerWeights& w, const float* x, int64_t n) const;

  std::string arch_ = "GptOssForCausalLM";
  std::unique_ptr<Checkpoint> ck_;  // owns the memory maps every view points into
  Plan plan_;
  GptOssConfig cfg_;
  GptOssWeights w_;
  RopeTable rope_;
  int64_t max_chunk_ = 256;
  int64_t rollback_ = 16;         // LoadOptions::rollback_tokens: part of a sliding ring
  uint64_t dense_bytes_ = 0;      // per forward: every weight but the routed experts
  uint64_t expert_bytes_ = 0;     // one routed expert of one layer: gate_up + down (+ biases)
  mutable std::mutex mu_;
  mutable ThreadPool pool_;
  std::unique_ptr<ForwardProfile> profile_;
  std::unique_ptr<Backend> backend_;
};

// The registry's loader for GptOssForCausalLM.
std::unique_ptr<Model> load_gpt_oss(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                    const LoadOptions& options);

}  // namespace nibble
