#include "model/deepseek_v3.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/moe_routing.h"
#include "model/cpu_backend.h"
#include "model/device_backend.h"
#include "model/forward_profile.h"
#include "model/step_parts.h"
#include "util/error.h"

namespace nibble {

DeepseekV3Model::DeepseekV3Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                 const LoadOptions& options)
    : ck_(std::move(ck)),
      plan_(std::move(plan)),
      max_chunk_(options.max_chunk_tokens),
      pool_(options.threads),
      profile_(options.profile ? std::make_unique<ForwardProfile>() : nullptr),
      backend_(std::make_unique<CpuBackend>(&pool_, profile_.get(),
                                            attention_isa_for(options.plan.linear_backend, plan_.device))) {
  if (max_chunk_ <= 0) fail("max_chunk_tokens must be positive, got ", max_chunk_);
  require_host_device(plan_.device, "DeepSeek-V3");
  cfg_ = parse_deepseek_v3_config(ck_->config(), ck_->file_path("config.json"));
  w_ = bind_deepseek_v3_weights(*ck_, det, plan_, cfg_, options);
  rope_ = RopeTable(cfg_.rope, cfg_.qk_rope);
  mla_ = MlaShape{cfg_.n_heads, cfg_.qk_nope, cfg_.qk_rope, cfg_.v_head_dim, cfg_.kv_lora_rank,
                  float(cfg_.softmax_scale)};
  dense_bytes_ = plan_.bytes_per_token;
  uint64_t routed_bytes = 0;
  for (const GroupPlan& g : plan_.groups)
    if (g.group == "routed_experts") {
      dense_bytes_ -= g.bytes_per_token;
      routed_bytes += g.bytes;
    }
  const int64_t moe_layers = cfg_.n_layers - cfg_.first_k_dense;
  expert_bytes_ = moe_layers > 0 ? routed_bytes / uint64_t(moe_layers * cfg_.n_experts) : 0;
}

DeepseekV3Model::~DeepseekV3Model() {
  if (profile_) std::fputs(profile_->report().c_str(), stderr);
}

std::unique_ptr<ModelState> DeepseekV3Model::new_state() const {
  auto st = std::make_unique<DeepseekV3State>();
  st->owner_ = this;
  for (int64_t l = 0; l < cfg_.n_layers; ++l) st->add_layer(backend_->new_mla_cache(mla_));
  return st;
}

DeepseekV3State& DeepseekV3Model::state_of(const ModelState& s, int64_t id) const {
  if (DeepseekV3State* st = owned_state<DeepseekV3State>(s, this)) return *st;
  fail("sequence ", id, ": its state belongs to another model");
}

std::unique_ptr<ModelState> DeepseekV3Model::fork(const ModelState& state) const {
  if (DeepseekV3DraftState* d = draft_state_of(state)) return std::make_unique<DeepseekV3DraftState>(*d);
  return std::make_unique<DeepseekV3State>(state_of(state, -1));
}

void DeepseekV3Model::truncate(ModelState& state, int64_t position) const {
  // Full attention keeps every row: the floor is 0 and every truncation is in place.
  if (DeepseekV3DraftState* d = draft_state_of(state)) {
    d->truncate_in_place(position, "the MTP draft state");
    return;
  }
  state_of(state, -1).truncate_in_place(position, "the sequence");
}

std::string DeepseekV3Model::draft_unavailable() const {
  if (cfg_.n_mtp_layers == 0) return "the checkpoint has no multi-token-prediction layer (num_nextn_predict_layers 0)";
  return "";
}

void DeepseekV3Model::step(std::span<const SeqStep> batch, StepStats* stats) const {
  std::lock_guard<std::mutex> lock(mu_);
  run_step_parts<DeepseekV3State>(
      batch, cfg_.vocab_size, cfg_.max_position, cfg_.path, max_chunk_,
      [&](const SeqStep& s) -> DeepseekV3State& { return state_of(*s.state, s.id); },
      [&](std::span<const Part> parts) { forward_parts(parts, stats); });
}

int64_t DeepseekV3Model::count_distinct(const Dsv3LayerWeights& w, const float* x, int64_t n) const {
  std::vector<float> logits(size_t(n * cfg_.n_experts));
  w.router.run(x, n, logits.data(), &pool_);
  MoeRouting r;
  route_tokens(w.moe, logits.data(), nullptr, n, &r);
  return int64_t(std::set<int32_t>(r.experts.begin(), r.experts.end()).size());
}

void DeepseekV3Model::run_mlp(const Dsv3Mlp& m, Tensor h, Tensor y) const {
  Backend& be = *backend_;
  const size_t mark = be.mark();
  Tensor g = be.alloc(h.rows, m.width()), u = be.alloc(h.rows, m.width());
  be.linear(m.gate, h, g);
  be.linear(m.up, h, u);
  be.silu_mul(g, u, g);
  be.linear(m.down, g, y);
  be.release_to(mark);
}

DeepseekV3Model::LayerScratch DeepseekV3Model::alloc_layer_scratch(int64_t n) const {
  Backend& be = *backend_;
  const int64_t D = cfg_.hidden, H = cfg_.n_heads, C = cfg_.kv_lora_rank, R = cfg_.qk_rope;
  LayerScratch s;
  s.h = be.alloc(n, D);
  s.y = be.alloc(n, D);
  s.y2 = be.alloc(n, D);
  s.q = be.alloc(n, H * mla_.q_width());
  s.qa = cfg_.q_lora_rank > 0 ? be.alloc(n, cfg_.q_lora_rank) : Tensor{};
  s.kv = be.alloc(n, C + R);
  s.latent = be.alloc(n, C);
  s.k_rope = be.alloc(n, R);
  s.o = be.alloc(n, H * cfg_.v_head_dim);
  return s;
}

void DeepseekV3Model::layer_forward(const Dsv3LayerWeights& w, const LayerScratch& s,
                                    std::span<const int64_t> positions, std::span<const MlaSeq> seqs, Tensor x,
                                    StepStats* stats) const {
  const int64_t H = cfg_.n_heads, C = cfg_.kv_lora_rank;
  Backend& be = *backend_;
  const Dsv3Attention& a = w.attn;
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(x, w.attn_norm.data(), cfg_.rms_eps, s.h);
  }
  {
    PhaseTimer _(be.profile(), Phase::attention);
    {
      PhaseTimer _l(be.profile(), Phase::attn_linear);
      if (cfg_.q_lora_rank > 0) {
        be.linear(a.q_a, s.h, s.qa);
        be.rms_norm(s.qa, a.q_a_norm.data(), cfg_.rms_eps, s.qa);
        be.linear(a.q_b, s.qa, s.q);
      } else {
        be.linear(a.q, s.h, s.q);
      }
      be.linear(a.kv_a, s.h, s.kv);
    }
    be.copy_cols(s.kv, 0, s.latent);
    be.copy_cols(s.kv, C, s.k_rope);
    be.rms_norm(s.latent, a.kv_a_norm.data(), cfg_.rms_eps, s.latent);
    be.rope(rope_, s.q, H, positions, false);  // the trailing qk_rope channels of each head
    be.rope(rope_, s.k_rope, 1, positions, false);
    {
      PhaseTimer _c(be.profile(), Phase::attn_core);
      int64_t first = 0;
      for (const MlaSeq& seq : seqs) {
        be.mla_attend(mla_, a.kv_b.data(), seq, s.q.slice(first, seq.count), s.latent.slice(first, seq.count),
                      s.k_rope.slice(first, seq.count), s.o.slice(first, seq.count));
        first += seq.count;
      }
    }
    {
      PhaseTimer _l(be.profile(), Phase::attn_linear);
      be.linear(a.o, s.o, s.y);
    }
    be.add_to_streams(s.y, x);  // x += y
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(x, w.ffn_norm.data(), cfg_.rms_eps, s.h);
  }
  PhaseTimer _(be.profile(), Phase::moe);
  if (w.dense) {
    run_mlp(w.mlp, s.h, s.y);
    be.add_to_streams(s.y, x);
    return;
  }
  if (stats) {
    const int64_t distinct = count_distinct(w, s.h.data, s.h.rows);
    stats->distinct_experts += distinct;
    stats->weight_bytes += uint64_t(distinct) * expert_bytes_;
  }
  be.moe_layer(w.moe, w.moe_fn, s.h, s.y);
  // HF: experts(h) + shared_experts(h), then the residual add.
  if (w.has_shared) {
    run_mlp(w.shared, s.h, s.y2);
    be.add_to_streams(s.y2, s.y);
  }
  be.add_to_streams(s.y, x);
}

void DeepseekV3Model::head_rows(const std::vector<float>& norm, const BoundLinear& head, Tensor x,
                                std::span<const int64_t> rows, std::span<float* const> out,
                                std::span<const DrawParams> draws, std::span<int32_t* const> drawn) const {
  if (rows.empty()) return;
  Backend& be = *backend_;
  const int64_t n = int64_t(rows.size()), V = cfg_.vocab_size;
  Tensor picked = be.alloc(n, cfg_.hidden), logits = be.alloc(n, V);
  be.gather_rows(x, rows, picked);
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(picked, norm.data(), cfg_.rms_eps, picked);
  }
  {
    PhaseTimer _(be.profile(), Phase::head);
    be.linear(head, picked, logits);
  }
  deliver_logits(be, logits, out, draws, drawn);
}

void DeepseekV3Model::forward_parts(std::span<const Part> parts, StepStats* stats) const {
  const int64_t D = cfg_.hidden, V = cfg_.vocab_size;
  StepTokens lay = lay_out_step(parts, V);
  const int64_t n = int64_t(lay.ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(lay.decode, n);
  be.begin_step(lay.decode);

  Tensor x = be.alloc(n, D);  // the residual stream [n, D]
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(w_.embed, lay.ids, 1, x);
  }
  const LayerScratch scratch = alloc_layer_scratch(n);
  std::vector<MlaSeq> seqs(parts.size());
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    for (size_t i = 0; i < parts.size(); ++i)
      seqs[i] = MlaSeq{parts[i].st->layer(l), parts[i].count, parts[i].st->position()};
    layer_forward(w_.layers[size_t(l)], scratch, lay.positions, seqs, x, stats);
  }
  if (stats) {
    stats->tokens += n;
    stats->sub_steps += 1;
    stats->weight_bytes += dense_bytes_;
  }
  {
    // The rows the MTP layer reads: the final norm's output (lm_head's
    // input), normed in the backend's memory, then handed out with to_host
    // like the logits.
    int64_t first = 0;
    for (const Part& p : parts) {
      const SeqStep& s = *p.seq;
      const int64_t j0 = std::max(p.from, s.hidden_first), j1 = p.from + p.count;
      if (s.hidden && j0 < j1) {
        const size_t mark = be.mark();
        Tensor normed = be.alloc(j1 - j0, D);
        be.rms_norm(x.slice(first + j0 - p.from, j1 - j0), w_.norm.data(), cfg_.rms_eps, normed);
        be.to_host(normed, s.hidden + (j0 - s.hidden_first) * D);
        be.release_to(mark);
      }
      first += p.count;
    }
  }
  advance_states(parts, lay.ids);
  head_rows(w_.norm, w_.head, x, lay.logit_rows, lay.logit_out, lay.draws, lay.drawn);
}

std::unique_ptr<Model> load_deepseek_v3(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                        const LoadOptions& options) {
  // A checkpoint must state its dimensions: the defaults (the 671B's) would
  // only turn a missing field into a tensor-shape error.
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
                          "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                          "moe_intermediate_size", "intermediate_size"})
    if (auto it = ck->config().find(key); it == ck->config().end() || it->is_null())
      fail(ck->file_path("config.json"), ": field \"", key, "\" is missing; a checkpoint must state its dimensions");
  return std::make_unique<DeepseekV3Model>(std::move(ck), det, std::move(plan), options);
}

}  // namespace nibble
