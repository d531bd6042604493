// The per-sequence state of DeepSeek-V4's attention on the GPU
// (model/cuda_attention_cache.h keeps the buffers, model/cuda_backend_attend.cpp
// runs a step): row rings indexed by position, the compressor's pooling of a
// closed window into an entry, and each query's key list for the attention
// core (attention_sinks.h). The arithmetic is the CPU's
// (deepseek_v4_compressor.cpp, deepseek_v4_attention.cpp attend_cpu): the
// same terms in the same order per output, so results differ only by expf
// and the fused multiply-adds nvcc forms. Every pointer is device memory;
// launches are asynchronous on `stream` and never synchronise.
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

// Rows of a ring: position p lives in row p % ring_rows. Stores rows
// [t_from, n) of src [n, width] (row stride width) at positions p0 + t, each
// plus bias[(p0 + t) % bias_period] when bias [bias_period, width] is not
// null (the compressor's gate rows take their slot's ape). t_from lets a
// caller skip rows that later ones of the same call would overwrite.
void cuda_ring_store(float* ring, int64_t ring_rows, int64_t width, const float* src, int64_t n, int64_t p0,
                     int64_t t_from, const float* bias, int64_t bias_period, void* stream);
// out [count, width] = the rows of positions p_from .. p_from + count - 1.
void cuda_ring_load(const float* ring, int64_t ring_rows, int64_t width, int64_t p_from, int64_t count, float* out,
                    void* stream);

// Pools windows w0 .. w0 + count - 1 of a compressor whose per-token rows sit
// in rings kv_rows / score_rows [ring_rows, width] (score already + ape):
//   out[w - w0][ch] = sum_j softmax_j(score slots) * kv slots,
// slots = the window's `ratio` positions in channel ch (CSA, overlap: the
// window's Cb half, channel dim + ch, preceded for w > 0 by the previous
// window's Ca half, channel ch). Softmax as ops.cpp softmax_inplace (max,
// exp, a double sum, one reciprocal). out [count, dim]; norm and RoPE follow
// with the row ops. One thread per (window, channel).
void cuda_compressor_pool(const float* kv_rows, const float* score_rows, int64_t ring_rows, int64_t width,
                          int64_t dim, int64_t ratio, bool overlap, int64_t w0, int64_t count, float* out,
                          void* stream);

// Each query's key list for cuda_attention_sinks: token t at pos = p0 + t
// reads the window rows (p - first) of the window pool for p in
// [max(first, pos - window + 1), pos], then compressed entries as -1 - e:
// mode 1 (HCA) every e < min((pos + 1) / ratio, n_entries), mode 2 (CSA) the
// indexer's selected[t * topk + k] for k < selected_counts[t]; mode 0 none.
// keys [n, max_keys], counts [n]. One thread per token.
void cuda_attention_key_lists(int64_t n, int64_t p0, int64_t first, int64_t window, int mode, int64_t ratio,
                              int64_t n_entries, const int32_t* selected, const int32_t* selected_counts,
                              int64_t topk, int64_t max_keys, int32_t* keys, int32_t* counts, void* stream);

// ---- host round trips (tests) ----
// The ring after cuda_ring_store.
std::vector<float> cuda_ring_store_host(std::vector<float> ring, int64_t width, const std::vector<float>& src,
                                        int64_t p0, int64_t t_from, const std::vector<float>& bias,
                                        int64_t bias_period);
std::vector<float> cuda_compressor_pool_host(const std::vector<float>& kv_rows, const std::vector<float>& score_rows,
                                             int64_t width, int64_t dim, int64_t ratio, bool overlap, int64_t w0,
                                             int64_t count);
struct KeyListsHost {
  std::vector<int32_t> keys, counts;
};
KeyListsHost cuda_attention_key_lists_host(int64_t n, int64_t p0, int64_t first, int64_t window, int mode,
                                           int64_t ratio, int64_t n_entries, const std::vector<int32_t>& selected,
                                           const std::vector<int32_t>& selected_counts, int64_t topk,
                                           int64_t max_keys);

}  // namespace nibble
