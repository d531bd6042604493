// DeepSeek-V4 attention (dsv4.md §2.3), shared by sliding, CSA and HCA
// layers. Per token x:
//   qr = q_norm(wq_a x);  q = wq_b qr -> [H, d], per-head unweighted RMSNorm, RoPE
//   kv = kv_norm(wkv x) -> [d], RoPE          (one shared head: K = V = kv)
//   keys = the `sliding_window` most recent kv (this token included)
//          + compressed entries: HCA all visible ones, CSA the indexer's picks
//   o_h = sum_j softmax_j(q_h·k_j / sqrt(d) | sink_h) k_j   (the sink only adds
//         exp(sink_h) to the denominator)
//   o_h: inverse RoPE at the query position (V carried RoPE)
//   out = wo_b( concat_g wo_a[g] · o[group g] )   (grouped output projection)
// Sliding layers use the "main" RoPE; CSA/HCA layers the "compress" one.
//
// A forward step holds the tokens of several sequences, concatenated: the
// projections, norms and RoPE run once over all of them (each token at its
// own position), the window, compressor, indexer and attention core per
// sequence on its own state, so a token's result never depends on the other
// sequences in the step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/attention_cache.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_indexer.h"

namespace nibble {

struct AttentionWeights {
  AttnKind kind = AttnKind::sliding;
  BoundLinear wq_a;              // [q_lora, D]
  std::vector<float> q_norm;     // [q_lora]
  BoundLinear wq_b;              // [H*d, q_lora]
  BoundLinear wkv;               // [d, D]
  std::vector<float> kv_norm;    // [d]
  BoundLinear wo_a;              // [G*o_lora, H*d/G]: group g uses rows g*o_lora ..
  BoundLinear wo_b;              // [D, G*o_lora]
  std::vector<float> sink;       // [H]
  std::optional<CompressorWeights> compressor;  // CSA, HCA
  std::optional<IndexerWeights> indexer;        // CSA
};

// Per-layer decode state of one sequence (dsv4.md "Incremental decode state"),
// as the CPU backend keeps it in host memory (HostAttentionCache below).
// The ring holds `rollback` rows more than the window, so that truncating by
// up to that many tokens finds the window before the new end intact.
struct AttentionState {
  std::vector<float> ring;       // [window + rollback, d]: kv of position p in row p % rows
  int64_t ring_high = 0;         // one past the highest position ever written to the ring
  CompressorState compressor;    // attention entries (width d)
  CompressorState indexer;       // indexer keys (width index_head_dim)
  uint64_t bytes() const { return sizeof(float) * ring.capacity() + compressor.bytes() + indexer.bytes(); }
};

// Shapes and constants one attention call needs.
struct AttentionShape {
  int64_t hidden = 0, heads = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora = 0, o_groups = 0, o_lora = 0, window = 0;
  double rms_eps = 1e-6;
  int64_t rollback = 0;          // tokens truncate() must reach back without refeeding
};

// The model's attention shape from its config; rollback: LoadOptions::rollback_tokens.
AttentionShape deepseek_v4_attention_shape(const DeepseekV4Config& c, int64_t rollback);

// One sequence's share of a step: rows [first, first + count) of the step's
// activations, at positions p0 .. p0+count-1 of its layer cache.
struct AttnSeq {
  AttentionCache* cache = nullptr;
  int64_t first = 0, count = 0, p0 = 0;
};

class Backend;
struct Tensor;
struct IndexerProjections;

// x [T, D] (the normed block input) of a step's tokens at `positions` [T]
// -> out [T, D], as a sequence of backend ops. `seqs` partitions the T rows
// by sequence. rope: the layer's flavour; compress_rope: for the compressor
// and indexer.
void attention_forward(Backend& be, const AttentionWeights& w, const AttentionShape& s, const RopeTable& rope,
                       const RopeTable& compress_rope, Tensor x, std::span<const int64_t> positions,
                       std::span<const AttnSeq> seqs, Tensor out);

// wo_a's rows of each group g, [g o_lora, (g + 1) o_lora), as views of
// their own; none when the format cannot express one of them (FP8 tiles
// that straddle groups), and then every group multiplies by the whole matrix
// and keeps its rows. The CUDA backend and its weight store
// (deepseek_v4_store.h) share this rule, so the store holds the slices or
// the matrix, never both.
std::vector<WeightView> wo_a_group_slices(const WeightView& wo_a, const AttentionShape& s);

// The CPU implementations of the backend's attention ops (cpu_backend.cpp).
// grouped_wo_a_cpu: o [n, H*d] -> y [n, G*o_lora]. attend_cpu: see Backend::attend
// (q, kv, o of the sequence's own rows; comp_kv / comp_score of the step).
void grouped_wo_a_cpu(const BoundLinear& wo_a, const AttentionShape& s, const float* o, int64_t n, float* y,
                      ThreadPool* pool);
void attend_cpu(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope, const AttnSeq& seq,
                const float* q, const float* kv, const float* comp_kv, const float* comp_score,
                const IndexerProjections* idx, float* o, ThreadPool* pool, class ForwardProfile* prof, CpuIsa isa);

// The CPU backend's cache: an AttentionState in host memory, for the layer
// with weights *w (which outlive it: the model's) and shape s.
class HostAttentionCache final : public AttentionCache {
 public:
  HostAttentionCache(const AttentionWeights* w, const AttentionShape& s) : w_(w), s_(s) {}
  std::unique_ptr<AttentionCache> clone() const override { return std::make_unique<HostAttentionCache>(*this); }
  int64_t truncate_floor() const override;
  void truncate(int64_t p) override;
  uint64_t bytes() const override { return state.bytes(); }

  AttentionState state;

 private:
  const AttentionWeights* w_;
  AttentionShape s_;
};

// seq's cache as the CPU backend's (fails on another backend's cache).
AttentionState& host_attention_state(const AttnSeq& seq);

}  // namespace nibble
