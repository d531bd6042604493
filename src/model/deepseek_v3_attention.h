// DeepSeek-V3 multi-head latent attention (MLA; transformers'
// DeepseekV3Attention) with the weight absorption that lets the decode cache
// hold only what MLA compresses.
//
// transformers, per token t and head h (C = kv_lora_rank, n = qk_nope_head_dim,
// r = qk_rope_head_dim, v = v_head_dim):
//   c_t      = kv_a_layernorm((x_t W_kv_a^T)[0:C])            [C]   the latent
//   kr_t     = rope((x_t W_kv_a^T)[C:C+r])                    [r]   one key for all heads
//   k_{t,h}  = [W_UK_h c_t ; kr_t],  W_UK_h = kv_b rows h(n+v) .. h(n+v)+n    [n, C]
//   v_{t,h}  = W_UV_h c_t,           W_UV_h = kv_b rows h(n+v)+n .. (h+1)(n+v) [v, C]
//   s_{t,j,h}= (q_nope_{t,h} . k_nope_{j,h} + q_rope_{t,h} . kr_j) * scale
//   o_{t,h}  = sum_j softmax_j(s) v_{j,h}
// Absorbed, as nibble computes it (the same sums, reassociated):
//   q_nope . (W_UK_h c_j) = (W_UK_h^T q_nope) . c_j      q_abs [C], once per (t, h)
//   sum_j p_j (W_UV_h c_j) = W_UV_h (sum_j p_j c_j)       ctx [C], once per (t, h)
// so the cache keeps c_j and kr_j only: (C + r) floats per token per layer
// (576 for DeepSeek-V3 / Kimi K2, against 2 * 128 * (128 + 64) expanded),
// and no past key is ever expanded. Per (t, h) it costs n*C (q_abs) +
// T*(C + r) (scores) + T*C (ctx) + v*C multiply-adds. The result differs
// from transformers' only by f32 rounding order: each product is
// reassociated over sums of length n, C or T.
//
// How the CPU runs it (docs/deepseek_v3.md, "Decode attention cost"): the
// SIMD kernels (kernels/cpu/mla_avx512.cpp, mla_avx2.cpp) take one work item
// per (token, slice of heads) and pass the cache in row blocks that every
// group of 8 heads of the slice reuses from L2 / L1, in register tiles of 8
// heads x 2 rows (scores) and 8 heads x 32 columns (ctx): a token reads the
// cache twice per slice instead of twice per head. The portable path keeps
// one item per (token, head).
//
// The RoPE half of q and kr is rotated in DeepSeek's interleaved pairs
// (rope_interleave: transformers rotates pairs (2i, 2i+1) and stores them
// de-interleaved; the dot products over q and k are the same either way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/attention_cache.h"

namespace nibble {

class ThreadPool;

struct MlaShape {
  int64_t heads = 0;     // H
  int64_t nope = 0;      // qk_nope_head_dim
  int64_t rope = 0;      // qk_rope_head_dim
  int64_t v = 0;         // v_head_dim
  int64_t latent = 0;    // kv_lora_rank C
  float scale = 0;       // softmax scale (yarn mscale folded in)
  int64_t q_width() const { return nope + rope; }
};

// Storage on 64-byte boundaries: with C and r multiples of 16 (512 and 64
// as published) every cache row then starts a cache line, and the SIMD
// kernels' 64-byte row loads never straddle two (a large std::vector's data
// sits 16 bytes into a line: ~5% slower in a micro-benchmark).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as allocators must
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
};

// One layer's cache of one sequence: every fed position's latent (after
// kv_a_layernorm) and RoPE'd shared key, f32.
struct MlaCache {
  std::vector<float, CacheLineAllocator<float>> latent;  // [positions, C]
  std::vector<float, CacheLineAllocator<float>> k_rope;  // [positions, r]
  int64_t rows(int64_t c) const { return c > 0 ? int64_t(latent.size()) / c : 0; }
  uint64_t bytes() const { return sizeof(float) * (latent.capacity() + k_rope.capacity()); }
};

// The CPU backend's cache (Backend::new_mla_cache): an MlaCache in host
// memory for a layer of shape s. Full attention keeps every row, so every
// truncation is in place (a resize).
class HostMlaCache final : public AttentionCache {
 public:
  explicit HostMlaCache(const MlaShape& s) : s_(s) {}
  std::unique_ptr<AttentionCache> clone() const override { return std::make_unique<HostMlaCache>(*this); }
  int64_t truncate_floor() const override { return 0; }
  void truncate(int64_t p) override;
  uint64_t bytes() const override { return cache.bytes(); }

  MlaCache cache;

 private:
  MlaShape s_;
};

// One sequence's share of a step in one layer: `count` tokens fed at
// `position` (= the rows its cache holds before the step). The cache comes
// from the backend that runs mla_attend (a HostMlaCache for the CPU's).
struct MlaSeq {
  AttentionCache* cache = nullptr;
  int64_t count = 0;
  int64_t position = 0;
};

// Appends latent [count, C] and k_rope [count, r] (RoPE'd) to the cache,
// then o [count, H*v] = absorbed attention of q [count, H*(n+r)] (its RoPE
// half RoPE'd) over the cache. kv_b: kv_b_proj as f32 [H*(n+v), C].
// Runs the SIMD kernels of `isa` (kernels/cpu/mla_*.cpp: one work item per
// token and slice of heads, each cache row loaded into registers once per
// group of 8 heads) or, for CpuIsa::ref, the portable loop (one item per
// token and head). Either way a token's output does not depend on the other
// tokens of the step nor on the thread count. Throws for an ISA this CPU
// cannot run.
void mla_attend_cpu(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* latent,
                    const float* k_rope, float* o, ThreadPool* pool, CpuIsa isa);
// The same with the best ISA this CPU has.
void mla_attend_cpu(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* latent,
                    const float* k_rope, float* o, ThreadPool* pool);

}  // namespace nibble
