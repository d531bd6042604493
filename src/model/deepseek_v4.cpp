#include "model/deepseek_v4.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/deepseek_v4_store.h"
#include "model/device_backend.h"
#include "model/forward_profile.h"
#include "model/step_parts.h"
#include "util/error.h"

namespace nibble {

DeepseekV4Model::DeepseekV4Model(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                 const LoadOptions& options)
    : ck_(std::move(ck)),
      plan_(std::move(plan)),
      max_chunk_(options.max_chunk_tokens),
      // On a GPU the host only launches (no op runs on the pool).
      pool_(plan_.device.kind == DeviceKind::cuda ? 1 : options.threads),
      profile_(options.profile ? std::make_unique<ForwardProfile>() : nullptr),
      backend_(make_backend(plan_.device, &pool_, profile_.get(),
                            attention_isa_for(options.plan.linear_backend, plan_.device), options.cuda_graphs)) {
  if (max_chunk_ <= 0) fail("max_chunk_tokens must be positive, got ", max_chunk_);
  cfg_ = parse_deepseek_v4_config(ck_->config(), ck_->file_path("config.json"));
  w_ = bind_deepseek_v4_weights(*ck_, det, plan_, cfg_, options);
  rope_main_ = RopeTable(cfg_.rope_main, cfg_.rope_dim);
  rope_compress_ = RopeTable(cfg_.rope_compress, cfg_.rope_dim);
  // What a forward reads besides the routed experts: the plan's bytes per
  // token less the routed experts' share (top_k of them per token).
  dense_bytes_ = plan_.bytes_per_token;
  for (const GroupPlan& g : plan_.groups)
    if (g.group == "routed_experts") dense_bytes_ -= g.bytes_per_token;
  for (const BlockWeights& b : w_.layers) {
    const ExpertWeights& e = b.moe.experts.at(0);
    expert_bytes_.push_back(e.w1.bytes() + e.w3.bytes() + e.w2.bytes());
  }
  hc_ = HcShape{cfg_.hc_mult, cfg_.hidden, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), cfg_.rms_eps};
  if (options.rollback_tokens < 0) fail("rollback_tokens must be >= 0, got ", options.rollback_tokens);
  attn_ = deepseek_v4_attention_shape(cfg_, options.rollback_tokens);
  if (plan_.device.kind == DeviceKind::cuda) {
    // Every weight onto the GPU now, not at the first step. The host repacks
    // them into the kernels' layouts (~0.5 GB/s per core), so the upload
    // takes the CPU threads the forward itself does not use there.
    ThreadPool repack(options.threads);
    backend_->place_weights(deepseek_v4_store_entries(w_, attn_), options.on_upload_progress, &repack);
  }
}

DeepseekV4Model::~DeepseekV4Model() {
  if (profile_) std::fputs(profile_->report().c_str(), stderr);
}

std::unique_ptr<ModelState> DeepseekV4Model::new_state() const {
  auto st = std::make_unique<DeepseekV4State>();
  st->owner_ = this;
  for (const BlockWeights& b : w_.layers) st->add_layer(backend_->new_attention_cache(b.attn, attn_));
  return st;
}

DeepseekV4State& DeepseekV4Model::state_of(const ModelState& s, int64_t id) const {
  if (DeepseekV4State* st = owned_state<DeepseekV4State>(s, this)) return *st;
  fail("sequence ", id, ": its state belongs to another model");
}

std::unique_ptr<ModelState> DeepseekV4Model::fork(const ModelState& state) const {
  if (DeepseekV4DraftState* d = draft_state_of(state)) return std::make_unique<DeepseekV4DraftState>(*d);
  return std::make_unique<DeepseekV4State>(state_of(state, -1));
}

void DeepseekV4Model::truncate(ModelState& state, int64_t position) const {
  if (DeepseekV4DraftState* d = draft_state_of(state)) {
    // The draft state keeps no history of its inputs (the residual rows), so
    // it cannot be refed: truncation stops at the floor.
    if (position < d->truncate_floor() || position > d->position())
      fail("truncate the MTP draft state to position ", position, ": it holds ", d->position(),
           " rows and reaches back to ", d->truncate_floor(), " without its inputs (valid: ", d->truncate_floor(),
           " .. ", d->position(), ")");
    d->truncate_in_place(position, "the MTP draft state");
    return;
  }
  DeepseekV4State& st = state_of(state, -1);
  // Deeper than the kept rows reach: feed the prefix again into a fresh state.
  if (!st.truncate_in_place(position, "the sequence")) refeed_prefix(*this, st, position);
}

void DeepseekV4Model::step(std::span<const SeqStep> batch, StepStats* stats) const {
  std::lock_guard<std::mutex> lock(mu_);
  run_step_parts<DeepseekV4State>(
      batch, cfg_.vocab_size, cfg_.max_position, cfg_.path, max_chunk_,
      [&](const SeqStep& s) -> DeepseekV4State& { return state_of(*s.state, s.id); },
      [&](std::span<const Part> parts) { forward_parts(parts, stats); });
}

void DeepseekV4Model::forward_parts(std::span<const Part> parts, StepStats* stats) const {
  const int64_t N = cfg_.hc_mult, D = cfg_.hidden, V = cfg_.vocab_size;
  // The step's tokens, sequence after sequence: ids, positions [T], the
  // rows whose logits are wanted and where each goes.
  StepTokens lay = lay_out_step(parts, V);
  std::vector<int32_t>& ids = lay.ids;
  std::vector<int64_t>& positions = lay.positions;
  std::vector<int64_t>& logit_rows = lay.logit_rows;
  std::vector<float*>& logit_out = lay.logit_out;
  const int64_t n = int64_t(ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(lay.decode, n);
  be.begin_step(lay.decode);

  // Embedding, copied into each of the N residual streams: [n, N*D].
  Tensor streams = be.alloc(n, N * D);
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(w_.embed, ids, N, streams);
  }

  std::vector<AttnSeq> seqs(parts.size());
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    int64_t first = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      seqs[i] = AttnSeq{parts[i].st->layer(l), first, parts[i].count, parts[i].st->position()};
      first += parts[i].count;
    }
    const bool compressed = cfg_.layer_types[size_t(l)] != AttnKind::sliding;
    int64_t distinct = 0;
    block_forward(be, w_.layers[size_t(l)], hc_, attn_, compressed ? rope_compress_ : rope_main_, rope_compress_, ids,
                  positions, seqs, streams, stats ? &distinct : nullptr);
    if (stats) {
      stats->distinct_experts += distinct;
      stats->weight_bytes += uint64_t(distinct) * expert_bytes_[size_t(l)];
    }
  }
  if (stats) {
    stats->tokens += n;
    stats->sub_steps += 1;
    stats->weight_bytes += dense_bytes_;
  }
  // The residual streams before hc_head of the rows a draft layer will read,
  // straight into the caller's buffer.
  copy_hidden_rows(be, parts, streams, N * D);
  advance_states(parts, ids);
  head_rows(be, w_.hc_head, w_.norm, streams, logit_rows, logit_out, lay.draws, lay.drawn);
}

void DeepseekV4Model::head_rows(Backend& be, const HcHeadWeights& hc_head, const std::vector<float>& norm,
                                Tensor streams, std::span<const int64_t> rows, std::span<float* const> out,
                                std::span<const DrawParams> draws, std::span<int32_t* const> drawn) const {
  if (rows.empty()) return;
  // Only the rows whose logits are wanted go through the head: [n, V].
  const int64_t n = int64_t(rows.size()), N = cfg_.hc_mult, D = cfg_.hidden, V = cfg_.vocab_size;
  Tensor picked = be.alloc(n, N * D), y = be.alloc(n, D), logits = be.alloc(n, V);
  be.gather_rows(streams, rows, picked);
  {
    PhaseTimer _(be.profile(), Phase::hc);
    be.hc_head(hc_head, hc_, picked, y);
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(y, norm.data(), cfg_.rms_eps, y);
  }
  {
    PhaseTimer _(be.profile(), Phase::head);
    be.linear(w_.head, y, logits);
  }
  deliver_logits(be, logits, out, draws, drawn);
}

std::unique_ptr<Model> load_deepseek_v4(std::unique_ptr<Checkpoint> ck, const Detection& det, Plan plan,
                                        const LoadOptions& options) {
  // A checkpoint's config.json must state its dimensions: the HF defaults
  // (V4-Flash's 4096 hidden, 43 layers, ...) would only turn a missing field
  // into a confusing tensor-shape error. Other fields keep HF's defaults.
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"})
    if (auto it = ck->config().find(key); it == ck->config().end() || it->is_null())
      fail(ck->file_path("config.json"), ": field \"", key, "\" is missing; a checkpoint must state its dimensions");
  return std::make_unique<DeepseekV4Model>(std::move(ck), det, std::move(plan), options);
}

}  // namespace nibble
