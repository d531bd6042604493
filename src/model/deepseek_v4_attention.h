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
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

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

// Per-layer decode state (dsv4.md "Incremental decode state").
struct AttentionState {
  std::vector<float> ring;       // [window, d]: kv of position p in row p % window
  CompressorState compressor;    // attention entries (width d)
  CompressorState indexer;       // indexer keys (width index_head_dim)
};

// Shapes and constants one attention call needs.
struct AttentionShape {
  int64_t hidden = 0, heads = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora = 0, o_groups = 0, o_lora = 0, window = 0;
  double rms_eps = 1e-6;
};

// x [n, D] (the normed block input) for tokens p0 .. p0+n-1 -> out [n, D].
// rope: the layer's flavour; compress_rope: for the compressor and indexer.
void attention_forward(const AttentionWeights& w, const AttentionShape& s, const RopeTable& rope,
                       const RopeTable& compress_rope, const float* x, int64_t n, int64_t p0, AttentionState& st,
                       float* out, ThreadPool* pool);

}  // namespace nibble
