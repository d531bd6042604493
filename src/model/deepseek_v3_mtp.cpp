// DeepSeek-V3's multi-token-prediction layer (model.layers.{num_hidden_layers},
// the DeepSeek-V3 report's MTP module, eq. 21-23), the draft of speculative
// decoding. Per row, with h the hidden of some position p and `next` the
// token at p + 1:
//   e  = enorm(embed(next))                         [D]   the layer's embed_tokens copy
//   x  = eh_proj([e ; hnorm(h)])                    [D]   eh_proj [D, 2D], embedding columns first
//   x  = decoder layer(x)   MLA over the layer's own latent cache, MoE + shared experts
//   y  = shared_head.norm(x)                        [D]
//   logits = shared_head.head(y)                    [V]
// h is the main model's final-norm output (lm_head's input: SeqStep::hidden
// of DeepseekV3Model), or, for a chained draft, the layer's own y: in the
// report the module reads "the representation" h_i^{k-1} that the previous
// depth hands its output head, and OutHead is a plain linear map, so that
// representation is the head's input, after the norm. vLLM's and SGLang's
// DeepSeek MTP read the main model's output hidden state, which is after its
// final norm, and both concatenate the embedding first (the report writes the
// hidden first; the published eh_proj's column order is what they follow).
// Row r of a draft state is RoPE'd at position r: rows start at main
// position 0 (the runtime feeds every row), so row r pairs main position r's
// hidden with token r + 1 at position r, as vLLM and SGLang position it.
// The decoder layer is the main model's layer_forward; only the input
// projection and the head are the layer's own.
#include <algorithm>

#include "model/deepseek_v3.h"
#include "model/forward_profile.h"
#include "util/error.h"

namespace nibble {

std::unique_ptr<ModelState> DeepseekV3Model::new_draft_state() const {
  if (w_.mtp.empty()) fail("DeepSeek-V3: no MTP draft layer: ", draft_unavailable());
  auto st = std::make_unique<DeepseekV3DraftState>();
  st->owner_ = this;
  st->add_layer(backend_->new_mla_cache(mla_));
  return st;
}

DeepseekV3DraftState* DeepseekV3Model::draft_state_of(const ModelState& s) const {
  return owned_state<DeepseekV3DraftState>(s, this);
}

void DeepseekV3Model::draft_step(std::span<const DraftStep> batch) const {
  if (w_.mtp.empty()) fail("DeepSeek-V3: no MTP draft layer: ", draft_unavailable());
  std::lock_guard<std::mutex> lock(mu_);
  run_draft_parts<DeepseekV3DraftState>(
      batch, cfg_.vocab_size, cfg_.max_position, max_chunk_, [&](const ModelState& s) { return draft_state_of(s); },
      [&](std::span<const DraftPart> parts) { draft_forward_parts(parts); });
}

void DeepseekV3Model::draft_forward_parts(std::span<const DraftPart> parts) const {
  const Dsv3MtpWeights& m = w_.mtp[0];
  const int64_t D = cfg_.hidden, V = cfg_.vocab_size;
  auto [ids, positions, logit_rows, logit_out, hidden_rows, hidden_out] = lay_out_draft_step(parts, V);
  const int64_t n = int64_t(ids.size());
  Backend& be = *backend_;
  if (profile_) profile_->begin_step(n == int64_t(parts.size()), n);
  be.begin_step(n == int64_t(parts.size()));

  // cat [n, 2D] = [enorm(embed(next)) ; hnorm(h)], then x = eh_proj(cat).
  Tensor e = be.alloc(n, D), h = be.alloc(n, D), cat = be.alloc(n, 2 * D), x = be.alloc(n, D);
  {
    int64_t first = 0;
    for (const DraftPart& p : parts) {
      be.from_host(p.seq->hidden + p.from * D, h.slice(first, p.count));
      first += p.count;
    }
  }
  {
    PhaseTimer _(be.profile(), Phase::embed);
    be.embed(m.embed, ids, 1, e);
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(e, m.enorm.data(), cfg_.rms_eps, e);
    be.rms_norm(h, m.hnorm.data(), cfg_.rms_eps, h);
  }
  be.paste_cols(e, 0, cat);
  be.paste_cols(h, D, cat);
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.linear(m.eh_proj, cat, x);
  }

  const LayerScratch scratch = alloc_layer_scratch(n);
  std::vector<MlaSeq> seqs(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) seqs[i] = MlaSeq{parts[i].st->layer(0), parts[i].count, parts[i].st->position()};
  layer_forward(m.layer, scratch, positions, seqs, x, nullptr);
  advance_states(parts, ids);

  // hidden_out: the head's input shared_head.norm(x), handed out with to_host.
  if (!hidden_rows.empty()) {
    Tensor normed = be.alloc(int64_t(hidden_rows.size()), D);
    be.gather_rows(x, hidden_rows, normed);
    be.rms_norm(normed, m.head_norm.data(), cfg_.rms_eps, normed);
    be.to_host_rows(normed, hidden_out);
  }
  head_rows(m.head_norm, m.head, x, logit_rows, logit_out);
}

}  // namespace nibble
