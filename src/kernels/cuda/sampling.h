// Next-token sampling on the GPU (issue 16, step 2): the same rule as
// kernels/token_draw.h (DrawParams per row), so that with the same uniform
// draw u the GPU picks the CPU's token (up to the order of a few double
// sums at a boundary), and only the ids cross to the host:
//   greedy (temperature 0): the highest logit, the lowest id on ties;
//   else candidates sorted by (logit descending, id ascending) with the
//   CPU's 64-bit keys (a segmented radix sort, CUB), top-k (ties with the
//   k-th kept), softmax in double at 1/temperature, top-p (the smallest
//   prefix whose mass reaches top_p), min-p (p >= min_p * p_max), then the
//   first candidate whose cumulative probability exceeds u (the last if
//   none does).
// u comes from the caller, one per row: the Sampler's seeded stream is host
// state and costs nothing to advance there. Penalties (repetition,
// presence, frequency) are not on the GPU: a caller that has them samples
// on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/token_draw.h"

namespace nibble {

// Device scratch for `rows` rows of `vocab` logits (keys, sorted keys, the
// sort's temporary storage, offsets), to be allocated once per batch size.
size_t cuda_sample_workspace_bytes(int64_t rows, int64_t vocab);

// logits [rows, ld] device f32 (the first `vocab` columns are drawn from:
// every row's limit; DrawParams::vocab is not read); params [rows] device;
// ids [rows] device int32. On `stream`, no sync.
void cuda_sample(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DrawParams* params,
                 void* workspace, size_t workspace_bytes, int32_t* ids, void* stream = nullptr);

// Host round trip for tests.
std::vector<int32_t> cuda_sample_host(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                      const std::vector<DrawParams>& params);

}  // namespace nibble
