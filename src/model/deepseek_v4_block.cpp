#include "model/deepseek_v4_block.h"

#include <algorithm>
#include <vector>

#include "kernels/moe_routing.h"
#include "model/backend.h"
#include "model/forward_profile.h"

namespace nibble {

void block_forward(Backend& be, const BlockWeights& w, const HcShape& hc, const AttentionShape& as,
                   const RopeTable& rope, const RopeTable& compress_rope, std::span<const int32_t> ids,
                   std::span<const int64_t> positions, std::span<const AttnSeq> seqs, Tensor streams,
                   int64_t* distinct_experts) {
  const int64_t T = streams.rows, N = hc.streams, D = hc.hidden;
  const size_t mark = be.mark();
  Tensor x = be.alloc(T, D), y = be.alloc(T, D), post = be.alloc(T, N), comb = be.alloc(T, N * N);

  // Attention sublayer.
  {
    PhaseTimer _(be.profile(), Phase::hc);
    be.hc_pre(w.hc_attn, hc, streams, x, post, comb);
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(x, w.attn_norm.data(), as.rms_eps, x);
  }
  {
    PhaseTimer _(be.profile(), Phase::attention);
    attention_forward(be, w.attn, as, rope, compress_rope, x, positions, seqs, y);
  }
  // MoE sublayer.
  {
    PhaseTimer _(be.profile(), Phase::hc);
    be.hc_post(hc, y, post, comb, streams);
    be.hc_pre(w.hc_ffn, hc, streams, x, post, comb);
  }
  {
    PhaseTimer _(be.profile(), Phase::norm);
    be.rms_norm(x, w.ffn_norm.data(), as.rms_eps, x);
  }
  {
    PhaseTimer _(be.profile(), Phase::moe);
    be.moe(w, x, ids, y);
  }
  if (distinct_experts) {
    // Benchmarks only: route the tokens once more and count the experts hit
    // (the router logits brought to the host: a device backend's Tensors
    // are not host memory).
    Tensor logits = be.alloc(T, w.moe.n_experts);
    be.linear(w.router, x, logits);
    std::vector<float> host(size_t(T * w.moe.n_experts));
    be.to_host(logits, host.data());
    MoeRouting r;
    route_tokens(w.moe, host.data(), ids.data(), T, &r);
    std::vector<char> hit(size_t(w.moe.n_experts), 0);
    for (int32_t e : r.experts) hit[size_t(e)] = 1;
    *distinct_experts = std::count(hit.begin(), hit.end(), char(1));
  }
  {
    PhaseTimer _(be.profile(), Phase::hc);
    be.hc_post(hc, y, post, comb, streams);
  }
  be.release_to(mark);
}

}  // namespace nibble
