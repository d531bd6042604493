// MoE routing shared by every MoE kernel (dsv4.md §2.6, HF transformers'
// DeepseekV4TopKRouter / DeepseekV4HashRouter): router logits -> scores ->
// expert selection -> routing weights. Selection reproduces torch.topk on
// CPU exactly, ties included, because which of two equal experts is chosen
// changes the output and HF is the oracle.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe.h"

namespace nibble {

struct MoeRouting {
  int64_t n = 0;                 // tokens
  int64_t top_k = 0;
  std::vector<int32_t> experts;  // [n, top_k] selected experts, in torch.topk's order
  std::vector<float> weights;    // [n, top_k] routing weight of each selection
};

// scores[E] = score_fn(logits[E]) in f32: softmax (over all experts),
// sigmoid, or sqrt(softplus) with torch's softplus threshold of 20.
void moe_scores(ScoringFunc f, const float* logits, int64_t n_experts, float* scores);

// Indices of the top k of key[0..n) as torch.topk(key, k, sorted=False)
// returns them on CPU: a partial sort when k * 64 <= n, else nth_element,
// over (value, index) pairs with NaN ranked highest (libstdc++'s algorithms,
// which PyTorch's CPU kernel runs). out: [k].
void torch_topk_indices(const float* key, int64_t n, int64_t k, int32_t* out);

// Routes n tokens from their router logits [n, E] (f32): selection by
// top-k of score + bias, or by tid2eid[token_ids[t]] for hash layers;
// weight = score at the selected expert, divided by (sum + 1e-20) when
// norm_topk_prob, times routed_scaling. Throws nibble::Error for a bad
// token id, a tid2eid entry outside [0, E), or an inconsistent layer.
void route_tokens(const MoeWeights& w, const float* logits, const int32_t* token_ids, int64_t n,
                  MoeRouting* out);

// Checks that the layer's shapes agree (router [E, D], experts [I, D] /
// [D, I], top_k <= E, ...); errors name the tensors.
void check_moe_weights(const MoeWeights& w);

}  // namespace nibble
