// The attention core of DeepSeek-V4 on the GPU: for each query token t and
// head h, softmax over [q·k_j * scale | sink_h] of its key list (the sink is
// one more logit whose probability is dropped, as HF concatenates it), and
// o = sum_j p_j k_j / denominator (V = K: one shared KV head). The key list
// of a token is indices into two pools, so that the sliding window (rows of
// the per-sequence ring) and the compressed entries (CSA's indexer top-k or
// all of HCA's visible entries) are read where they are, without a copy:
// index i >= 0 is row i of `ring`, index i < 0 row -1 - i of `entries`.
// Per (t, h) the sums run in key order as in the CPU's attend_cpu, so the
// only differences are the dot products' order and expf.
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

struct AttentionSinksArgs {
  const float* q = nullptr;         // [n, heads, dim]
  const float* ring = nullptr;      // [ring_rows, dim]
  const float* entries = nullptr;   // [n_entries, dim], or null
  const int32_t* keys = nullptr;    // [n, max_keys] indices (see above)
  const int32_t* counts = nullptr;  // [n] keys of each token (<= max_keys)
  const float* sinks = nullptr;     // [heads]
  float* logits = nullptr;          // scratch [n, heads, max_keys]
  float* o = nullptr;               // [n, heads, dim]
  int64_t n = 0, heads = 0, dim = 0, max_keys = 0;
  float scale = 1.0f;               // 1 / sqrt(dim)
  void* stream = nullptr;
};
void cuda_attention_sinks(const AttentionSinksArgs& a);

// Host round trip for tests: keys / counts as above, pools as given.
std::vector<float> cuda_attention_sinks_host(const std::vector<float>& q, const std::vector<float>& ring,
                                             const std::vector<float>& entries, const std::vector<int32_t>& keys,
                                             const std::vector<int32_t>& counts, const std::vector<float>& sinks,
                                             int64_t n, int64_t heads, int64_t dim, int64_t max_keys, float scale);

}  // namespace nibble
