// The Lightning indexer's selection on the GPU (model/deepseek_v4_indexer.cpp
// indexer_select, after the compressor has appended): for query t and each
// of its visible compressed entries s,
//   I(t, s) = sum_h relu(q_th · k_s) * softmax_scale * (hw_th * weights_scale),
// then the top k entries by I, ties to the lower index, in that order (the
// CPU's partial_sort comparator). One block per query; the top k by k
// block-wide argmax rounds (fine for decode's few queries; a sort is the
// prefill variant).
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

struct IndexerTopkArgs {
  const float* q = nullptr;        // [n, heads, dim] (RoPE applied)
  const float* hw = nullptr;       // [n, heads] weights_proj x
  const float* entries = nullptr;  // [n_entries, dim] the indexer's compressed keys
  const int32_t* visible = nullptr;  // [n] entries query t may see (<= max_visible)
  float* scores = nullptr;         // [n, max_visible] out (scratch for the rounds: chosen ones end -inf)
  int32_t* selected = nullptr;     // [n, topk] out, -1 past count
  int32_t* counts = nullptr;       // [n] out: min(topk, visible)
  int64_t n = 0, heads = 0, dim = 0, max_visible = 0, topk = 0;
  float softmax_scale = 1.0f, weights_scale = 1.0f;
  void* stream = nullptr;
};
void cuda_indexer_topk(const IndexerTopkArgs& a);

// Host round trip for tests: the scores before selection and the selection.
struct IndexerTopkHost {
  std::vector<float> scores;      // [n, max_visible]
  std::vector<int32_t> selected;  // [n, topk]
  std::vector<int32_t> counts;    // [n]
};
IndexerTopkHost cuda_indexer_topk_host(const std::vector<float>& q, const std::vector<float>& hw,
                                       const std::vector<float>& entries, const std::vector<int32_t>& visible,
                                       int64_t n, int64_t heads, int64_t dim, int64_t topk);

}  // namespace nibble
