#include "model/deepseek_v4_block.h"

#include <algorithm>

#include "kernels/moe_routing.h"
#include "model/forward_profile.h"

namespace nibble {

void block_forward(const BlockWeights& w, const HcShape& hc, const AttentionShape& as, const RopeTable& rope,
                   const RopeTable& compress_rope, const int32_t* ids, const int64_t* positions, int64_t n,
                   std::span<const AttnSeq> seqs, float* streams, ThreadPool* pool, int64_t* distinct_experts) {
  const int64_t N = hc.streams, D = hc.hidden;
  std::vector<float> x(size_t(n * D)), y(size_t(n * D)), post(size_t(n * N)), comb(size_t(n * N * N));

  {
    PhaseTimer _(Phase::hc);
    hc_pre(w.hc_attn, hc, streams, n, x.data(), post.data(), comb.data(), pool);
  }
  {
    PhaseTimer _(Phase::norm);
    rms_norm(x.data(), n, D, w.attn_norm.data(), as.rms_eps, x.data());
  }
  {
    PhaseTimer _(Phase::attention);
    attention_forward(w.attn, as, rope, compress_rope, x.data(), n, positions, seqs, y.data(), pool);
  }
  {
    PhaseTimer _(Phase::hc);
    hc_post(hc, y.data(), post.data(), comb.data(), n, streams);
    hc_pre(w.hc_ffn, hc, streams, n, x.data(), post.data(), comb.data(), pool);
  }
  {
    PhaseTimer _(Phase::norm);
    rms_norm(x.data(), n, D, w.ffn_norm.data(), as.rms_eps, x.data());
  }
  {
    PhaseTimer _(Phase::moe);
    w.moe_fn(w.moe, x.data(), ids, n, y.data(), pool);
  }
  if (distinct_experts) {
    std::vector<float> logits(size_t(n * w.moe.n_experts));
    w.router.run(x.data(), n, logits.data(), pool);
    MoeRouting r;
    route_tokens(w.moe, logits.data(), ids, n, &r);
    std::vector<char> hit(size_t(w.moe.n_experts), 0);
    for (int32_t e : r.experts) hit[size_t(e)] = 1;
    *distinct_experts = std::count(hit.begin(), hit.end(), char(1));
  }
  PhaseTimer _(Phase::hc);
  hc_post(hc, y.data(), post.data(), comb.data(), n, streams);
}

}  // namespace nibble
