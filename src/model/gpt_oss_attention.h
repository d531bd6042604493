// gpt-oss attention (transformers' GptOssAttention, eager): grouped-query
// heads over one per-sequence KV cache per layer, RoPE in the half-split
// (NeoX) layout, a causal mask that is either full or a sliding window, and
// one learned "sink" logit per head that joins each softmax and is dropped:
//
//   s_j = q · k_j / sqrt(d)              for the visible keys j
//   p_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sink - m)),  m = max(s, sink)
//   o   = sum_j p_j v_j
//
// A sliding layer's query at position p sees keys (p - window, p]; a full
// layer's, [0, p]. The cache keeps every fed position's RoPE'd key and value
// (f32), so truncation is a resize and costs nothing; memory per token is
// 2 * n_kv_heads * head_dim * 4 bytes per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v4_rope.h"

namespace nibble {

class ThreadPool;

struct GqaShape {
  int64_t heads = 0;     // H query heads
  int64_t kv_heads = 0;  // KV heads; query head h reads KV head h / (H / kv_heads)
  int64_t head_dim = 0;  // d
  int64_t window = 0;    // > 0: sliding window of this many keys; 0: full causal
};

// One layer's cache of one sequence.
struct KvCache {
  std::vector<float> k, v;  // [positions, kv_heads * head_dim] each, k RoPE'd
  int64_t rows(int64_t width) const { return width > 0 ? int64_t(k.size()) / width : 0; }
  uint64_t bytes() const { return sizeof(float) * (k.capacity() + v.capacity()); }
};

// One sequence's share of a step in one layer: step rows [first, first + count),
// fed at `position` (= the rows its cache holds before the step).
struct GqaSeq {
  KvCache* cache = nullptr;
  int64_t first = 0, count = 0;
  int64_t position = 0;
};

// Rotates each of a row's `heads` vectors of width d by the angle of its
// position: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin over the halves
// (x1, x2) of the vector (HF _apply_rotary_emb). x: [T, heads * d].
void rope_half_split(const RopeTable& table, float* x, int64_t rows, int64_t heads, int64_t d,
                     const int64_t* positions);

// Appends k, v [count, kv_heads * d] to the cache, then o [count, H * d] =
// attention of q [count, H * d] over the cache. sinks: [H] f32.
void gqa_attend_cpu(const GqaShape& s, const float* sinks, const GqaSeq& seq, const float* q, const float* k,
                    const float* v, float* o, ThreadPool* pool);

}  // namespace nibble
