// One DeepSeek-V4 attention layer's small weights for the tests of the
// attention caches and attend (tests/cuda): sliding (no compressor), HCA
// (a compressor of ratio m without overlap) or CSA (ratio m with overlap,
// and the Lightning indexer: 2 heads of 8, top-3, its own compressor of
// ratio m and dim 8). The compressors' ape and norm are random (seeded);
// the sinks too, one per head. The projections are the caller's.
#pragma once

#include <cstdint>

#include "model/deepseek_v4_attention.h"

namespace nibble::test {

AttentionWeights attention_layer(AttnKind kind, int64_t ratio, int64_t dim, int64_t heads, uint64_t seed);

}  // namespace nibble::test
