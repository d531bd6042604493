#include "model/deepseek_v3.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/moe_routing.h"
#include "model/cpu_backend.h"
#include "model/forward_profile.h"
#include "model/step_parts.h"
#include "util/error.h"

namespace nibble {

namespace {

// The attention follows the linear kernels when they are forced to one ISA
// (--linear-backend cpu_ref, cpu_avx2*, cpu_avx512*: a reference run stays
// scalar throughout, an AVX2 run on an AVX-512 host runs AVX2 attention
// too); otherwise the planned device's best.
CpuIsa mla_isa_for(const LoadOptions& options, const Device& device) {
  const std::string& b = options.plan.linear_backend;
  if (b == "cpu_ref") return CpuIsa::ref;
  if (b.rfind("cpu_avx512", 0) == 0) return CpuIsa::avx512;
  if (b.rfind("cpu_avx2", 0) == 0) return CpuIsa::avx2;
  return best_cpu_isa(device.cpu);
}

}  // namespace

DeepseekV3Model::DeepseekV3Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                 const LoadOptions& options)
    : ck_(std::move(ck)),
      plan_(std::move(plan)),
      max_chunk_(options.max_chunk_tokens),
      pool_(options.threads),
      profile_(options.profile ? std::make_unique<ForwardProfile>() : nullptr),
      backend_(std::make_unique<CpuBackend>(&pool_, profile_.get(), mla_isa_for(options, plan_.device))) {
  if (max_chunk_ <= 0) fail("max_chunk_tokens must be positive, got ", max_chunk_);
  if (plan_.device.hypothetical || plan_.device.kind != DeviceKind::cpu)
    fail("device ", plan_.device.name, ": nibble can only run DeepSeek-V3 on this machine's CPU (device host)");
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

uint64_t DeepseekV3State::memory_bytes() const {
  uint64_t b = sizeof(*this);
  for (const MlaCache& c : layers_) b += c.bytes();
  return b;
}

std::unique_ptr<ModelState> DeepseekV3Model::new_state() const {
  auto st = std::make_unique<DeepseekV3State>();
  st->owner_ = this;
  st->layers_.resize(size_t(cfg_.n_layers));
  return st;
}

DeepseekV3State& DeepseekV3Model::state_of(const ModelState& s, int64_t id) const {
  auto* st = dynamic_cast<const DeepseekV3State*>(&s);
  if (!st || st->owner_ != this) fail("sequence ", id, ": its state belongs to another model");
  return const_cast<DeepseekV3State&>(*st);
}

std::unique_ptr<ModelState> DeepseekV3Model::fork(const ModelState& state) const {
  return std::make_unique<DeepseekV3State>(state_of(state, -1));
}

void DeepseekV3Model::truncate(ModelState& state, int64_t position) const {
  DeepseekV3State& st = state_of(state, -1);
  if (position < 0 || position > st.position_)
    fail("truncate to position ", position, ": the sequence holds ", st.position_, " tokens (valid: 0 .. ",
         st.position_, ")");
  for (MlaCache& c : st.layers_) {
    c.latent.resize(size_t(position * cfg_.kv_lora_rank));
    c.k_rope.resize(size_t(position * cfg_.qk_rope));
  }
  st.position_ = position;
}

std::string DeepseekV3Model::draft_unavailable() const {
  if (cfg_.n_mtp_layers == 0) return "the checkpoint has no multi-token-prediction layer (num_nextn_predict_layers 0)";
  return "DeepSeek-V3's MTP layer is loaded and validated, but speculative decoding with it is not implemented";
}

std::unique_ptr<ModelState> DeepseekV3Model::new_draft_state() const { fail("DeepSeek-V3: ", draft_unavailable()); }

void DeepseekV3Model::draft_step(std::span<const DraftStep>) const { fail("DeepSeek-V3: ", draft_unavailable()); }

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

void DeepseekV3Model::forward_parts(std::span<const Part> parts, StepStats* stats) const {
  const int64_t D = cfg_.hidden, V = cfg_.vocab_size, H = cfg_.n_heads, C = cfg_.kv_lora_rank, R = cfg_.qk_rope;
  StepTokens lay = lay_out_step(parts, V);
  const std::vector<int64_t>& positions = lay.positions;
  const int64_t n = int64_t(lay.ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(lay.decode, n);
  be.begin_step();

  Tensor x = be.alloc(n, D);  // the residual stream [n, D]
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(w_.embed, lay.ids, 1, x);
  }
  Tensor h = be.alloc(n, D), y = be.alloc(n, D), y2 = be.alloc(n, D);
  Tensor q = be.alloc(n, H * mla_.q_width()), kv = be.alloc(n, C + R);
  Tensor latent = be.alloc(n, C), k_rope = be.alloc(n, R), o = be.alloc(n, H * cfg_.v_head_dim);
  Tensor qa = cfg_.q_lora_rank > 0 ? be.alloc(n, cfg_.q_lora_rank) : Tensor{};
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const Dsv3LayerWeights& w = w_.layers[size_t(l)];
    const Dsv3Attention& a = w.attn;
    {
      PhaseTimer _(be.profile(), Phase::norm);
      be.rms_norm(x, w.attn_norm.data(), cfg_.rms_eps, h);
    }
    {
      PhaseTimer _(be.profile(), Phase::attention);
      {
        PhaseTimer _l(be.profile(), Phase::attn_linear);
        if (cfg_.q_lora_rank > 0) {
          be.linear(a.q_a, h, qa);
          be.rms_norm(qa, a.q_a_norm.data(), cfg_.rms_eps, qa);
          be.linear(a.q_b, qa, q);
        } else {
          be.linear(a.q, h, q);
        }
        be.linear(a.kv_a, h, kv);
      }
      be.copy_cols(kv, 0, latent);
      be.copy_cols(kv, C, k_rope);
      be.rms_norm(latent, a.kv_a_norm.data(), cfg_.rms_eps, latent);
      be.rope(rope_, q, H, positions, false);  // the trailing qk_rope channels of each head
      be.rope(rope_, k_rope, 1, positions, false);
      {
        PhaseTimer _c(be.profile(), Phase::attn_core);
        int64_t first = 0;
        for (const Part& p : parts) {
          const MlaSeq seq{&p.st->layers_[size_t(l)], p.count, p.st->position_};
          be.mla_attend(mla_, a.kv_b.data(), seq, q.slice(first, p.count), latent.slice(first, p.count),
                        k_rope.slice(first, p.count), o.slice(first, p.count));
          first += p.count;
        }
      }
      {
        PhaseTimer _l(be.profile(), Phase::attn_linear);
        be.linear(a.o, o, y);
      }
      be.add_to_streams(y, x);  // x += y
    }
    {
      PhaseTimer _(be.profile(), Phase::norm);
      be.rms_norm(x, w.ffn_norm.data(), cfg_.rms_eps, h);
    }
    PhaseTimer _(be.profile(), Phase::moe);
    if (w.dense) {
      run_mlp(w.mlp, h, y);
      be.add_to_streams(y, x);
      continue;
    }
    if (stats) {
      const int64_t distinct = count_distinct(w, h.data, n);
      stats->distinct_experts += distinct;
      stats->weight_bytes += uint64_t(distinct) * expert_bytes_;
    }
    be.moe_layer(w.moe, w.moe_fn, h, y);
    // HF: experts(h) + shared_experts(h), then the residual add.
    if (w.has_shared) {
      run_mlp(w.shared, h, y2);
      be.add_to_streams(y2, y);
    }
    be.add_to_streams(y, x);
  }
  if (stats) {
    stats->tokens += n;
    stats->sub_steps += 1;
    stats->weight_bytes += dense_bytes_;
  }
  {
    // The residual stream before the final norm, for callers that want it.
    int64_t first = 0;
    std::vector<int64_t> rows;
    for (const Part& p : parts) {
      const SeqStep& s = *p.seq;
      const int64_t j0 = std::max(p.from, s.hidden_first), j1 = p.from + p.count;
      if (s.hidden && j0 < j1) {
        rows.clear();
        for (int64_t j = j0; j < j1; ++j) rows.push_back(first + j - p.from);
        be.gather_rows(x, rows, Tensor{s.hidden + (j0 - s.hidden_first) * D, j1 - j0, D});
      }
      first += p.count;
    }
  }
  for (const Part& p : parts) p.st->position_ += p.count;
  if (lay.logit_rows.empty()) return;

  const int64_t rows = int64_t(lay.logit_rows.size());
  Tensor picked = be.alloc(rows, D), logits = be.alloc(rows, V);
  be.gather_rows(x, lay.logit_rows, picked);
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(picked, w_.norm.data(), cfg_.rms_eps, picked);
  }
  {
    PhaseTimer _(be.profile(), Phase::head);
    be.linear(w_.head, picked, logits);
  }
  for (int64_t r = 0; r < rows; ++r) std::copy(logits.row(r), logits.row(r) + V, lay.logit_out[size_t(r)]);
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
