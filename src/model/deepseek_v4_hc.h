// Manifold-constrained hyper-connections (mHC, dsv4.md §2.2). The residual is
// N = hc_mult parallel streams [N, D] per token. Before each sublayer, hc_pre
// reads all streams (RMS-normalised, flattened) through a small projection
// into three sets of weights: `pre` collapses the streams into the sublayer
// input, `post` spreads the sublayer output back over the streams, and `comb`
// (made doubly stochastic by Sinkhorn iterations) mixes the old streams into
// the new ones. hc_head is the final collapse before the output norm.
// Everything here is f32, as in HF's DeepseekV4HyperConnection / HyperHead.
#pragma once

#include <cstdint>
#include <vector>

#include "model/ops.h"

namespace nibble {

struct HcShape {
  int64_t streams = 4;         // N
  int64_t hidden = 0;          // D
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;        // floor added to pre and inside Sinkhorn
  double rms_eps = 1e-6;       // of the unweighted norm of the flattened streams
};

// One hyper-connection (hc_attn_* or hc_ffn_* of a layer).
struct HcWeights {
  BoundLinear fn;              // [(2+N)*N, N*D]: pre | post | comb mixes
  std::vector<float> base;     // [(2+N)*N]
  std::vector<float> scale;    // [3]: pre, post, comb
};

// The final collapse (hc_head_fn / base / scale).
struct HcHeadWeights {
  BoundLinear fn;              // [N, N*D]
  std::vector<float> base;     // [N]
  std::vector<float> scale;    // [1]
};

// streams [n, N, D] -> collapsed [n, D], post [n, N], comb [n, N, N]
// (comb[j][k]: weight of old stream j in new stream k).
void hc_pre(const HcWeights& w, const HcShape& s, const float* streams, int64_t n, float* collapsed, float* post,
            float* comb, ThreadPool* pool);

// streams[k] <- post[k] * out + sum_j comb[j][k] * streams[j], in place.
// out [n, D], post [n, N], comb [n, N, N], streams [n, N, D].
void hc_post(const HcShape& s, const float* out, const float* post, const float* comb, int64_t n, float* streams,
             ThreadPool* pool);

// streams [n, N, D] -> y [n, D] = sum_k (sigmoid(mix_k * scale + base_k) + eps) * stream_k.
void hc_head(const HcHeadWeights& w, const HcShape& s, const float* streams, int64_t n, float* y, ThreadPool* pool);

}  // namespace nibble
