#include "support/random_moe_layer.h"

namespace nibble::test {

RandomMoeLayer random_moe_layer(Format expert_fmt, Format shared_fmt, int64_t D, int64_t I, int64_t E,
                                int64_t K, uint64_t seed) {
  RandomMoeLayer l;
  l.w.hidden = D;
  l.w.inter = I;
  l.w.n_experts = E;
  l.w.top_k = K;
  l.w.scoring = ScoringFunc::sqrtsoftplus;
  l.w.routed_scaling = 1.5f;
  l.w.swiglu_limit = 0.8f;
  l.gate = random_weights(Format::bf16, E, D, seed);
  l.w.gate = l.gate.view;
  l.bias.resize(size_t(E));
  random_normal(l.bias.data(), E, seed + 1, 0.05f);
  l.w.bias = l.bias.data();
  // Reserved up front: the views below point into the elements.
  l.owned.reserve(size_t(3 * (E + 1)));
  auto expert = [&](Format f, uint64_t s) {
    l.owned.push_back(random_weights(f, I, D, s));
    l.owned.push_back(random_weights(f, I, D, s + 1));
    l.owned.push_back(random_weights(f, D, I, s + 2));
    const size_t n = l.owned.size();
    return ExpertWeights{l.owned[n - 3].view, l.owned[n - 2].view, l.owned[n - 1].view};
  };
  for (int64_t e = 0; e < E; ++e) l.w.experts.push_back(expert(expert_fmt, seed + 10 + 3 * uint64_t(e)));
  l.w.has_shared = true;
  l.w.shared = expert(shared_fmt, seed + 5);
  return l;
}

}  // namespace nibble::test
