#include "model/deepseek_v4_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/thread_pool.h"

namespace nibble {

void indexer_forward(const IndexerWeights& w, const RopeTable& rope, double rms_eps, const float* x, const float* qr,
                     int64_t n, int64_t p0, CompressorState& st, IndexerSelection& out, ThreadPool* pool) {
  compressor_forward(w.compressor, rope, rms_eps, x, n, p0, st, pool);
  const int64_t H = w.heads, d = w.dim, m = w.compressor.ratio, total = st.n_entries;
  std::vector<float> q(size_t(n * H * d)), hw(size_t(n * H));
  w.wq_b.run(qr, n, q.data(), pool);
  w.weights_proj.run(x, n, hw.data(), pool);
  const float softmax_scale = 1.0f / std::sqrt(float(d));
  const float weights_scale = 1.0f / std::sqrt(float(H));

  out.topk = w.topk;
  out.entries.assign(size_t(n * w.topk), -1);
  out.count.assign(size_t(n), 0);
  auto job = [&](int64_t t0, int64_t t1, int) {
    std::vector<float> score;
    std::vector<int32_t> order;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = p0 + t;
      const int64_t visible = std::min((pos + 1) / m, total);
      const int64_t k = std::min(w.topk, visible);
      if (k == 0) continue;
      float* qt = q.data() + t * H * d;
      rope.apply(qt, H, d, pos, /*inverse=*/false);
      score.assign(size_t(visible), 0.0f);
      for (int64_t s = 0; s < visible; ++s) {
        const float* key = st.entries.data() + s * d;
        float acc = 0;
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = qt + h * d;
          float dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += qh[i] * key[i];
          acc += std::max(dot, 0.0f) * softmax_scale * (hw[size_t(t * H + h)] * weights_scale);
        }
        score[size_t(s)] = acc;
      }
      order.resize(size_t(visible));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
      });
      std::copy(order.begin(), order.begin() + k, out.entries.begin() + t * w.topk);
      out.count[size_t(t)] = int32_t(k);
    }
  };
  if (pool) pool->parallel_for(n, job, 1);
  else job(0, n, 0);
}

}  // namespace nibble
