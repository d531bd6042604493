// The Lightning Indexer of CSA layers (dsv4.md §2.5): picks, for every query,
// the `index_topk` compressed entries its attention may read. It runs its
// own compressor (width index_head_dim) over the same windows as the
// attention compressor, so its keys K_I[s] and the attention entries share
// indices. For query t with low-rank query qr and input x:
//   q_I = wq_b(qr) -> [heads, dim], RoPE ("compress") at t
//   w   = weights_proj(x) * heads^-0.5
//   I(t, s) = sum_h w_h * ReLU(q_I[h] · K_I[s]) * dim^-0.5
// over visible entries s < (t + 1) / ratio; the top min(k, #visible) are kept
// (HF's topk over masked scores; equal scores keep the lower index).
//
// A forward step runs the projections once over every sequence's tokens
// (IndexerProjections), then each sequence's compressor update and selection
// on its own state (indexer_select).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/deepseek_v4_compressor.h"

namespace nibble {

struct IndexerWeights {
  int64_t heads = 0;               // index_n_heads
  int64_t dim = 0;                 // index_head_dim
  int64_t topk = 0;                // index_topk
  BoundLinear wq_b;                // [heads*dim, q_lora_rank]
  BoundLinear weights_proj;        // [heads, D]
  CompressorWeights compressor;    // overlap, ratio 4, width dim
};

// Selected entries of each query: entries [n][topk] (first count[t] valid).
struct IndexerSelection {
  int64_t topk = 0;
  std::vector<int32_t> entries;
  std::vector<int32_t> count;
};

// The indexer's per-token projections of a step's T tokens (all sequences),
// in buffers of the step's backend: the forward computes them with backend
// ops (deepseek_v4_attention.cpp: four linears and a RoPE), and each
// sequence's indexer_select reads its rows.
struct IndexerProjections {
  const float* kv = nullptr;       // [T, 2*dim] its compressor's rows (wkv x)
  const float* score = nullptr;    // [T, 2*dim] (wgate x)
  const float* q = nullptr;        // [T, heads, dim] wq_b qr, RoPE applied
  const float* hw = nullptr;       // [T, heads] weights_proj x
};

// One sequence's tokens: rows [first, first + n) of `proj`, at positions
// p0 .. p0+n-1 of state `st`. Feeds its compressor and selects entries for
// each of those queries (out.entries [n][topk]). isa: the scores' path (ref:
// the portable loop; else the SIMD kernels of kernels_x86.h, IndexerScores).
void indexer_select(const IndexerWeights& w, const RopeTable& rope, double rms_eps, const IndexerProjections& proj,
                    int64_t first, int64_t n, int64_t p0, int64_t rollback, CompressorState& st,
                    IndexerSelection& out, ThreadPool* pool, CpuIsa isa);

}  // namespace nibble
