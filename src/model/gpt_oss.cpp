#include "model/gpt_oss.h"

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

GptOssModel::GptOssModel(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan, const LoadOptions& options)
    : ck_(std::move(ck)),
      plan_(std::move(plan)),
      max_chunk_(options.max_chunk_tokens),
      rollback_(options.rollback_tokens),
      pool_(options.threads),
      profile_(options.profile ? std::make_unique<ForwardProfile>() : nullptr),
      backend_(std::make_unique<CpuBackend>(&pool_, profile_.get(),
                                            attention_isa_for(options.plan.linear_backend, plan_.device))) {
  if (max_chunk_ <= 0) fail("max_chunk_tokens must be positive, got ", max_chunk_);
  if (rollback_ < 0) fail("rollback_tokens must be >= 0, got ", rollback_);
  require_host_device(plan_.device, "gpt-oss");
  cfg_ = parse_gpt_oss_config(ck_->config(), ck_->file_path("config.json"));
  w_ = bind_gpt_oss_weights(*ck_, det, plan_, cfg_, options);
  rope_ = RopeTable(cfg_.rope, cfg_.head_dim);
  dense_bytes_ = plan_.bytes_per_token;
  uint64_t routed_bytes = 0;
  for (const GroupPlan& g : plan_.groups)
    if (g.group == "routed_experts") {
      dense_bytes_ -= g.bytes_per_token;
      routed_bytes += g.bytes;
    }
  expert_bytes_ = routed_bytes / uint64_t(cfg_.n_layers * cfg_.n_experts);
}

GptOssModel::~GptOssModel() {
  if (profile_) std::fputs(profile_->report().c_str(), stderr);
}

std::unique_ptr<ModelState> GptOssModel::new_state() const {
  auto st = std::make_unique<GptOssState>();
  st->owner_ = this;
  // A sliding layer's ring: the window's keys before a chunk's first query,
  // the chunk itself (<= max_chunk_ tokens), and rollback_ more for
  // truncation without refeeding (KvCache::truncate_floor).
  const int64_t ring = cfg_.sliding_window - 1 + max_chunk_ + rollback_;
  for (const GptOssLayerWeights& w : w_.layers)
    st->add_layer(backend_->new_gqa_cache(layer_shape(w), w.sliding ? ring : 0));
  return st;
}

GptOssState& GptOssModel::state_of(const ModelState& s, int64_t id) const {
  if (GptOssState* st = owned_state<GptOssState>(s, this)) return *st;
  fail("sequence ", id, ": its state belongs to another model");
}

std::unique_ptr<ModelState> GptOssModel::fork(const ModelState& state) const {
  return std::make_unique<GptOssState>(state_of(state, -1));
}

void GptOssModel::truncate(ModelState& state, int64_t position) const {
  GptOssState& st = state_of(state, -1);
  // Deeper than the kept rows reach: feed the prefix again into a fresh state.
  if (!st.truncate_in_place(position, "the sequence")) refeed_prefix(*this, st, position);
}

GqaShape GptOssModel::layer_shape(const GptOssLayerWeights& w) const {
  return GqaShape{cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim, w.sliding ? cfg_.sliding_window : 0};
}

std::unique_ptr<ModelState> GptOssModel::new_draft_state() const {
  fail("gpt-oss: ", draft_unavailable());
}

void GptOssModel::draft_step(std::span<const DraftStep>) const { fail("gpt-oss: ", draft_unavailable()); }

void GptOssModel::step(std::span<const SeqStep> batch, StepStats* stats) const {
  std::lock_guard<std::mutex> lock(mu_);
  run_step_parts<GptOssState>(
      batch, cfg_.vocab_size, cfg_.max_position, cfg_.path, max_chunk_,
      [&](const SeqStep& s) -> GptOssState& { return state_of(*s.state, s.id); },
      [&](std::span<const Part> parts) { forward_parts(parts, stats); });
}

int64_t GptOssModel::count_distinct(const GptOssLayerWeights& w, const float* x, int64_t n) const {
  std::vector<float> logits(size_t(n * cfg_.n_experts));
  w.router.run(x, n, logits.data(), &pool_);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < cfg_.n_experts; ++e) logits[size_t(t * cfg_.n_experts + e)] += w.router_bias[size_t(e)];
  MoeRouting r;
  route_tokens(w.moe, logits.data(), nullptr, n, &r);
  return int64_t(std::set<int32_t>(r.experts.begin(), r.experts.end()).size());
}

void GptOssModel::forward_parts(std::span<const Part> parts, StepStats* stats) const {
  const int64_t D = cfg_.hidden, V = cfg_.vocab_size, H = cfg_.n_heads, KV = cfg_.n_kv_heads, d = cfg_.head_dim;
  StepTokens lay = lay_out_step(parts, V);
  std::vector<int32_t>& ids = lay.ids;
  std::vector<int64_t>& positions = lay.positions;
  std::vector<int64_t>& logit_rows = lay.logit_rows;
  std::vector<float*>& logit_out = lay.logit_out;
  const int64_t n = int64_t(ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(lay.decode, n);
  be.begin_step(lay.decode);

  Tensor x = be.alloc(n, D);  // the residual stream [n, D]
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(w_.embed, ids, 1, x);
  }
  Tensor h = be.alloc(n, D), q = be.alloc(n, H * d), k = be.alloc(n, KV * d), v = be.alloc(n, KV * d);
  Tensor o = be.alloc(n, H * d), y = be.alloc(n, D);
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const GptOssLayerWeights& w = w_.layers[size_t(l)];
    {
      PhaseTimer _(be.profile(), Phase::norm);
      be.rms_norm(x, w.attn_norm.data(), cfg_.rms_eps, h);
    }
    {
      PhaseTimer _(be.profile(), Phase::attention);
      {
        PhaseTimer _l(be.profile(), Phase::attn_linear);
        be.linear(w.q, h, q);
        be.linear(w.k, h, k);
        be.linear(w.v, h, v);
        if (!w.q_bias.empty()) {
          be.add_bias(q, w.q_bias.data());
          be.add_bias(k, w.k_bias.data());
          be.add_bias(v, w.v_bias.data());
        }
      }
      be.rope_half_split(rope_, q, H, positions);
      be.rope_half_split(rope_, k, KV, positions);
      {
        PhaseTimer _c(be.profile(), Phase::attn_core);
        const GqaShape shape = layer_shape(w);
        int64_t first = 0;
        for (const Part& p : parts) {
          const GqaSeq seq{p.st->layer(l), first, p.count, p.st->position()};
          be.gqa_attend(shape, w.sinks.data(), seq, q.slice(first, p.count), k.slice(first, p.count),
                        v.slice(first, p.count), o.slice(first, p.count));
          first += p.count;
        }
      }
      {
        PhaseTimer _l(be.profile(), Phase::attn_linear);
        be.linear(w.o, o, y);
        if (!w.o_bias.empty()) be.add_bias(y, w.o_bias.data());
      }
      be.add_to_streams(y, x);  // x += y
    }
    {
      PhaseTimer _(be.profile(), Phase::norm);
      be.rms_norm(x, w.ffn_norm.data(), cfg_.rms_eps, h);
    }
    if (stats) {
      const int64_t distinct = count_distinct(w, h.data, n);
      stats->distinct_experts += distinct;
      stats->weight_bytes += uint64_t(distinct) * expert_bytes_;
    }
    {
      PhaseTimer _(be.profile(), Phase::moe);
      be.moe_layer(w.moe, w.moe_fn, h, y);
    }
    be.add_to_streams(y, x);
  }
  if (stats) {
    stats->tokens += n;
    stats->sub_steps += 1;
    stats->weight_bytes += dense_bytes_;
  }
  // The residual stream before the final norm, for callers that want it.
  copy_hidden_rows(be, parts, x, D);
  advance_states(parts, ids);
  if (logit_rows.empty()) return;

  const int64_t rows = int64_t(logit_rows.size());
  Tensor picked = be.alloc(rows, D), logits = be.alloc(rows, V);
  be.gather_rows(x, logit_rows, picked);
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(picked, w_.norm.data(), cfg_.rms_eps, picked);
  }
  {
    PhaseTimer _(be.profile(), Phase::head);
    be.linear(w_.head, picked, logits);
  }
  deliver_logits(be, logits, logit_out, lay.draws, lay.drawn);
}

std::unique_ptr<Model> load_gpt_oss(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                    const LoadOptions& options) {
  // A checkpoint must state its dimensions: GptOssConfig's defaults (the
  // 120b's) would only turn a missing field into a tensor-shape error.
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_local_experts", "intermediate_size"})
    if (auto it = ck->config().find(key); it == ck->config().end() || it->is_null())
      fail(ck->file_path("config.json"), ": field \"", key, "\" is missing; a checkpoint must state its dimensions");
  return std::make_unique<GptOssModel>(std::move(ck), det, std::move(plan), options);
}

}  // namespace nibble
