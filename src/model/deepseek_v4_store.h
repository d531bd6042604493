// The weights a DeepSeek-V4 forward reads on a CUDA device, as the weight
// store's entries (kernels/cuda/weight_store.h), so that CudaBackend can
// upload them all at load (Backend::place_weights) instead of repacking each
// on its first use, which left the first step to upload the whole model and
// a model too large for the GPU to fail there, halfway.
//
// One entry per matrix a backend op takes, in its kernel's layout:
//   - FP8 block-128 / BF16 linears (attention, compressors, indexer, router,
//     shared expert, head, the MTP layers' projections): one mma entry each;
//     wo_a as the row slices grouped_wo_a multiplies (the whole matrix where
//     a slice cannot be expressed, as CudaBackend::grouped_wo_a);
//   - each layer's routed experts: one w4a16 stack per projection (w1, w3,
//     w2), all experts back to back, as the MoE kernel reads them;
//   - F32 matrices (the hyper-connection mixes) and the embedding table: the
//     stored bytes.
// A matrix reached twice (the router's BoundLinear and the MoE's gate) is one
// entry. Norm weights, biases and the other small vectors stay with the
// backend's first-use mirror.
#pragma once

#include <vector>

#include "kernels/cuda/weight_store.h"
#include "model/deepseek_v4_weights.h"

namespace nibble {

// Throws nibble::Error naming the tensor for a matrix in a format no CUDA
// kernel of the backend reads (the plan refuses those at load, so this only
// guards against a binder that changed without this list).
std::vector<StoreEntry> deepseek_v4_store_entries(const DeepseekV4Weights& w, const AttentionShape& s);

}  // namespace nibble
