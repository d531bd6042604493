#include "model/deepseek_v4_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/kernels_x86.h"
#include "util/thread_pool.h"

namespace nibble {

void indexer_select(const IndexerWeights& w, const RopeTable& rope, double rms_eps, const IndexerProjections& proj,
                    int64_t first, int64_t n, int64_t p0, int64_t rollback, CompressorState& st,
                    IndexerSelection& out, ThreadPool* pool, CpuIsa isa) {
  const int64_t H = w.heads, d = w.dim, m = w.compressor.ratio, width = w.compressor.width();
  compressor_append(w.compressor, rope, rms_eps, proj.kv + first * width, proj.score + first * width, n,
                    p0, rollback, st);
  const int64_t total = st.n_entries;
  const float* q = proj.q + first * H * d;
  const float* hw = proj.hw + first * H;
  const float softmax_scale = 1.0f / std::sqrt(float(d));
  const float weights_scale = 1.0f / std::sqrt(float(H));

  // I(t, s) for entries [s0, s1) of query t: the SIMD kernels
  // (kernels_x86.h: IndexerScores), or the portable loop.
  auto score_range = [&](int64_t t, int64_t s0, int64_t s1, float* score) {
    const float* qt = q + t * H * d;
    if (isa != CpuIsa::ref) {
      std::vector<float> wt(static_cast<size_t>(H)), scratch(size_t((H + 7) / 8 * 8 * ((d + 15) / 16 * 16) + 16));
      for (int64_t h = 0; h < H; ++h) wt[size_t(h)] = softmax_scale * (hw[t * H + h] * weights_scale);
      float* aligned =
          scratch.data() + (16 - (reinterpret_cast<uintptr_t>(scratch.data()) / sizeof(float)) % 16) % 16;
      const x86::IndexerScores x{H, d, qt, wt.data(), st.entries.data(), s0, s1, score, aligned};
      if (isa == CpuIsa::avx512) x86::indexer_scores_avx512(x);
      else x86::indexer_scores_avx2(x);
      return;
    }
    for (int64_t s = s0; s < s1; ++s) {
      const float* key = st.entries.data() + s * d;
      float acc = 0;
      for (int64_t h = 0; h < H; ++h) {
        const float dot = dot_f32(qt + h * d, key, d);
        acc += std::max(dot, 0.0f) * softmax_scale * (hw[t * H + h] * weights_scale);
      }
      score[s] = acc;
    }
  };
  out.topk = w.topk;
  out.entries.assign(size_t(n * w.topk), -1);
  out.count.assign(size_t(n), 0);
  // Top k by score; equal scores keep the lower index (deterministic).
  auto select = [&](int64_t t, int64_t visible, const float* score, std::vector<int32_t>& order) {
    const int64_t k = std::min(w.topk, visible);
    order.resize(size_t(visible));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return score[a] != score[b] ? score[a] > score[b] : a < b;
    });
    std::copy(order.begin(), order.begin() + k, out.entries.begin() + t * w.topk);
    out.count[size_t(t)] = int32_t(k);
  };
  auto visible_of = [&](int64_t t) { return std::min((p0 + t + 1) / m, total); };

  // Each score is computed whole by one thread, so the split below changes
  // which thread computes it, never its value.
  if (!pool || n >= 2 * int64_t(pool->size())) {
    // Many queries (prefill): one query per task.
    pool_for(pool, n, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> score;
      std::vector<int32_t> order;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t visible = visible_of(t);
        if (visible == 0) continue;
        score.resize(size_t(visible));
        score_range(t, 0, visible, score.data());
        select(t, visible, score.data(), order);
      }
    });
  } else {
    // Few queries (decode): split each query's entries over the threads.
    std::vector<float> score;
    std::vector<int32_t> order;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t visible = visible_of(t);
      if (visible == 0) continue;
      score.resize(size_t(visible));
      pool_for(pool, visible, 64, [&](int64_t s0, int64_t s1) { score_range(t, s0, s1, score.data()); });
      select(t, visible, score.data(), order);
    }
  }
}

}  // namespace nibble
