// DeepSeek-V4's multi-token-prediction layer (mtp.0.*, dsv4.md §2.7), the
// draft of speculative decoding, as DeepSeek's official inference code
// (MTPBlock) defines it. Per row, with X the residual streams [N, D] of some
// position p (the main model's before its hc_head, or this layer's own output
// for a chained draft) and `next` the token at p + 1:
//   e = enorm(embed(next))                        [D]
//   h = h_proj(hnorm(X_k)) for each stream k      [N, D]  (norm and projection per stream)
//   X' = e_proj(e) + h_k                          [N, D]  (e_proj(e) broadcast over the streams)
//   X' = Block(X')   a full sliding-window, score-routed block (layer id n_layers)
//   logits = head(norm(hc_head(X')))              its own hc_head and norm; the shared head
// and X' is what the next chained draft reads. The block's attention keeps
// its own window of past rows (DeepseekV4DraftState), so the layer sees the
// rows before, as in training where it runs over the whole sequence shifted
// by one. Everything is written against the backend's ops, like the main
// forward: the residual rows come in through from_host and go out through
// to_host.
#include <algorithm>

#include "model/deepseek_v4.h"
#include "model/forward_profile.h"
#include "util/error.h"

namespace nibble {

std::unique_ptr<ModelState> DeepseekV4Model::new_draft_state() const {
  if (w_.mtp.empty()) fail("no MTP draft layer: ", w_.mtp_missing);
  auto st = std::make_unique<DeepseekV4DraftState>();
  st->owner_ = this;
  st->add_layer(backend_->new_attention_cache(w_.mtp[0].block.attn, attn_));
  return st;
}

DeepseekV4DraftState* DeepseekV4Model::draft_state_of(const ModelState& s) const {
  return owned_state<DeepseekV4DraftState>(s, this);
}

void DeepseekV4Model::draft_step(std::span<const DraftStep> batch) const {
  if (w_.mtp.empty()) fail("no MTP draft layer: ", w_.mtp_missing);
  std::lock_guard<std::mutex> lock(mu_);
  run_draft_parts<DeepseekV4DraftState>(
      batch, cfg_.vocab_size, cfg_.max_position, max_chunk_,
      [&](const ModelState& s) { return draft_state_of(s); },
      [&](std::span<const DraftPart> parts) { draft_forward_parts(parts); });
}

void DeepseekV4Model::draft_forward_parts(std::span<const DraftPart> parts) const {
  const MtpWeights& m = w_.mtp[0];
  const int64_t N = cfg_.hc_mult, D = cfg_.hidden, V = cfg_.vocab_size;
  auto [ids, positions, logit_rows, logit_out, hidden_rows, hidden_out] = lay_out_draft_step(parts, V);
  const int64_t n = int64_t(ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(n == int64_t(parts.size()), n);
  be.begin_step(n == int64_t(parts.size()));

  // The residual rows the layer reads: [n, N*D], per stream hnorm then h_proj.
  Tensor streams = be.alloc(n, N * D), normed = be.alloc(n, N * D);
  {
    int64_t first = 0;
    for (const DraftPart& p : parts) {
      be.from_host(p.seq->hidden + p.from * N * D, streams.slice(first, p.count));
      first += p.count;
    }
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(streams.reshaped(D), m.hnorm.data(), cfg_.rms_eps, normed.reshaped(D));
  }
  Tensor e = be.alloc(n, D), e_proj = be.alloc(n, D);
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(w_.embed, ids, 1, e);
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(e, m.enorm.data(), cfg_.rms_eps, e);
  }
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.linear(m.h_proj, normed.reshaped(D), streams.reshaped(D));  // [n*N, D]
    be.linear(m.e_proj, e, e_proj);
  }
  be.add_to_streams(e_proj, streams);

  std::vector<AttnSeq> seqs(parts.size());
  {
    int64_t first = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      seqs[i] = AttnSeq{parts[i].st->layer(0), first, parts[i].count, parts[i].st->position()};
      first += parts[i].count;
    }
  }
  block_forward(be, m.block, hc_, attn_, rope_main_, rope_compress_, ids, positions, seqs, streams);
  advance_states(parts, ids);

  if (!hidden_rows.empty()) {
    Tensor picked = be.alloc(int64_t(hidden_rows.size()), N * D);
    be.gather_rows(streams, hidden_rows, picked);
    be.to_host_rows(picked, hidden_out);
  }
  head_rows(be, m.hc_head, m.norm, streams, logit_rows, logit_out);
}

}  // namespace nibble
