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
// layer's, [0, p]. A full layer's cache keeps every fed position's RoPE'd key
// and value (f32), 2 * n_kv_heads * head_dim * 4 bytes per token; a sliding
// layer's keeps the last `ring` positions only (the window, a step's chunk and
// the rollback reach), so its memory does not grow with the context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/attention_cache.h"
#include "model/deepseek_v4_rope.h"

namespace nibble {

class ThreadPool;

struct GqaShape {
  int64_t heads = 0;     // H query heads
  int64_t kv_heads = 0;  // KV heads; query head h reads KV head h / (H / kv_heads)
  int64_t head_dim = 0;  // d
  int64_t window = 0;    // > 0: sliding window of this many keys; 0: full causal
};

// One layer's cache of one sequence. Position p lives in slot(p): p for a
// full layer, p % ring for a sliding one, whose ring holds positions
// [oldest, fed) (older slots were overwritten by later positions; slots of
// positions at or past `fed` after a truncation hold stale rows that no
// query reads, since a query at p reads keys <= p, all fed before it).
struct KvCache {
  std::vector<float> k, v;  // [slots, kv_heads * head_dim] each, k RoPE'd
  int64_t ring = 0;         // > 0: a sliding layer's slots; 0: one slot per position
  int64_t fed = 0;          // positions fed
  int64_t oldest = 0;       // the oldest position still in its slot

  int64_t slot(int64_t p) const { return ring > 0 ? p % ring : p; }
  // The earliest position truncate() can go back to: a query there needs the
  // keys (p - window, p) still held. 0 for a full layer (it keeps them all).
  int64_t truncate_floor(int64_t window) const;
  // Back to `position` (truncate_floor(window) .. fed), as if the later
  // positions had never been fed.
  void truncate(int64_t position, int64_t width, int64_t window);
  uint64_t bytes() const { return sizeof(float) * (k.capacity() + v.capacity()); }
};

// The CPU backend's cache (Backend::new_gqa_cache): a KvCache in host memory
// for a layer of shape s, with `ring` slots when it slides (0: full).
class HostGqaCache final : public AttentionCache {
 public:
  HostGqaCache(const GqaShape& s, int64_t ring) : s_(s) { kv.ring = ring; }
  std::unique_ptr<AttentionCache> clone() const override { return std::make_unique<HostGqaCache>(*this); }
  int64_t truncate_floor() const override { return kv.truncate_floor(s_.window); }
  void truncate(int64_t p) override { kv.truncate(p, s_.kv_heads * s_.head_dim, s_.window); }
  uint64_t bytes() const override { return kv.bytes(); }

  KvCache kv;

 private:
  GqaShape s_;
};

// One sequence's share of a step in one layer: step rows [first, first + count),
// fed at `position` (= the positions its cache was fed before the step). The
// cache comes from the backend that runs gqa_attend (a HostGqaCache for the
// CPU's).
struct GqaSeq {
  AttentionCache* cache = nullptr;
  int64_t first = 0, count = 0;
  int64_t position = 0;
};

// Rotates each of a row's `heads` vectors of width d by the angle of its
// position: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin over the halves
// (x1, x2) of the vector (HF _apply_rotary_emb). x: [T, heads * d].
void rope_half_split(const RopeTable& table, float* x, int64_t rows, int64_t heads, int64_t d,
                     const int64_t* positions);

// Appends k, v [count, kv_heads * d] to the cache, then o [count, H * d] =
// attention of q [count, H * d] over the cache. sinks: [H] f32. A sliding
// layer's ring must take the chunk without overwriting a key its first query
// reads: count <= ring - window + 1. isa: ref runs one item per (token,
// head); the SIMD paths run the latent-attention kernels (kernels_x86.h:
// MlaItem) per (token, KV head), each key and value row loaded once for the
// query heads that share it.
void gqa_attend_cpu(const GqaShape& s, const float* sinks, const GqaSeq& seq, const float* q, const float* k,
                    const float* v, float* o, ThreadPool* pool, CpuIsa isa);

}  // namespace nibble
