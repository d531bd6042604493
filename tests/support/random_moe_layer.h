// A random MoE layer for the kernel tests: E experts of one format (top-K),
// a shared expert of another (DeepSeek-V4 mixes MXFP4 experts with an FP8
// shared one), a BF16 router with a bias, DeepSeek-V4's scoring
// (sqrt(softplus), scaling 1.5) and a tight SwiGLU clamp (0.8) so that the
// clamp is exercised. Weights come from random_weights (every code drawn).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe.h"
#include "kernels/random_weights.h"

namespace nibble::test {

// Move-only (the views in `w` point into the owned vectors, which a move keeps).
struct RandomMoeLayer {
  std::vector<OwnedWeights> owned;  // w1, w3, w2 of each expert, then of the shared one
  OwnedWeights gate;                // [E, D] BF16
  std::vector<float> bias;          // [E]
  std::vector<int32_t> tid2eid;     // empty here; hash-routing tests fill it and point w at it
  MoeWeights w;
};

// Seeds: gate `seed`, bias seed + 1, expert e seed + 10 + 3e (w1, w3, w2 at
// +0, +1, +2), the shared expert seed + 5.
RandomMoeLayer random_moe_layer(Format expert_fmt, Format shared_fmt, int64_t D, int64_t I, int64_t E,
                                int64_t K, uint64_t seed);

}  // namespace nibble::test
