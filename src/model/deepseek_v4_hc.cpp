#include "model/deepseek_v4_hc.h"

#include <algorithm>
#include <cmath>

namespace nibble {

namespace {

// mixes[n, fn.rows] = RMSNorm_unweighted(streams flattened [n, N*D]) · fn^T
std::vector<float> hc_mixes(const BoundLinear& fn, const HcShape& s, const float* streams, int64_t n,
                            ThreadPool* pool) {
  const int64_t flat = s.streams * s.hidden;
  std::vector<float> normed(size_t(n * flat));
  pool_for(pool, n, 1, [&](int64_t t0, int64_t t1) {
    rms_norm(streams + t0 * flat, t1 - t0, flat, nullptr, s.rms_eps, normed.data() + t0 * flat);
  });
  std::vector<float> mixes(size_t(n * fn.rows()));
  fn.run(normed.data(), n, mixes.data(), pool);
  return mixes;
}

// y[D] = sum_k weight[k] * streams[k][D]
void collapse(const float* streams, const float* weight, int64_t N, int64_t D, float* y) {
  for (int64_t d = 0; d < D; ++d) {
    float acc = 0;
    for (int64_t k = 0; k < N; ++k) acc += weight[k] * streams[k * D + d];
    y[d] = acc;
  }
}

}  // namespace

void hc_pre(const HcWeights& w, const HcShape& s, const float* streams, int64_t n, float* collapsed, float* post,
            float* comb, ThreadPool* pool) {
  const int64_t N = s.streams, D = s.hidden, width = (2 + N) * N;
  std::vector<float> mixes = hc_mixes(w.fn, s, streams, n, pool);
  // Per token, independently (any split of the tokens gives the same bits).
  pool_for(pool, n, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> pre(static_cast<size_t>(N)), colsum(static_cast<size_t>(N));
    for (int64_t t = t0; t < t1; ++t) {
      const float* m = mixes.data() + t * width;
      float* pt = post + t * N;
      float* c = comb + t * N * N;
      for (int64_t k = 0; k < N; ++k) {
        pre[size_t(k)] = sigmoidf(m[k] * w.scale[0] + w.base[size_t(k)]) + s.hc_eps;
        pt[k] = 2.0f * sigmoidf(m[N + k] * w.scale[1] + w.base[size_t(N + k)]);
      }
      // comb = softmax over each row of the N x N logits, + eps.
      for (int64_t j = 0; j < N; ++j) {
        float* row = c + j * N;
        for (int64_t k = 0; k < N; ++k) row[k] = m[2 * N + j * N + k] * w.scale[2] + w.base[size_t(2 * N + j * N + k)];
        softmax_inplace(row, N);
        for (int64_t k = 0; k < N; ++k) row[k] += s.hc_eps;
      }
      // Sinkhorn: a column normalisation, then (iters - 1) x (rows, columns).
      auto normalize_columns = [&] {
        std::fill(colsum.begin(), colsum.end(), 0.0f);
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < N; ++k) colsum[size_t(k)] += c[j * N + k];
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < N; ++k) c[j * N + k] /= colsum[size_t(k)] + s.hc_eps;
      };
      auto normalize_rows = [&] {
        for (int64_t j = 0; j < N; ++j) {
          float sum = 0;
          for (int64_t k = 0; k < N; ++k) sum += c[j * N + k];
          for (int64_t k = 0; k < N; ++k) c[j * N + k] /= sum + s.hc_eps;
        }
      };
      normalize_columns();
      for (int64_t it = 1; it < s.sinkhorn_iters; ++it) {
        normalize_rows();
        normalize_columns();
      }
      collapse(streams + t * N * D, pre.data(), N, D, collapsed + t * D);
    }
  });
}

void hc_post(const HcShape& s, const float* out, const float* post, const float* comb, int64_t n, float* streams,
             ThreadPool* pool) {
  const int64_t N = s.streams, D = s.hidden;
  pool_for(pool, n, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> old(size_t(N * D));
    for (int64_t t = t0; t < t1; ++t) {
      float* x = streams + t * N * D;
      std::copy(x, x + N * D, old.begin());
      const float* c = comb + t * N * N;
      const float* p = post + t * N;
      const float* o = out + t * D;
      for (int64_t k = 0; k < N; ++k) {
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0;
          for (int64_t j = 0; j < N; ++j) acc += c[j * N + k] * old[size_t(j * D + d)];
          x[k * D + d] = p[k] * o[d] + acc;
        }
      }
    }
  });
}

void hc_head(const HcHeadWeights& w, const HcShape& s, const float* streams, int64_t n, float* y, ThreadPool* pool) {
  const int64_t N = s.streams, D = s.hidden;
  std::vector<float> mixes = hc_mixes(w.fn, s, streams, n, pool);
  std::vector<float> pre(static_cast<size_t>(N));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < N; ++k) pre[size_t(k)] = sigmoidf(mixes[size_t(t * N + k)] * w.scale[0] + w.base[size_t(k)]) + s.hc_eps;
    collapse(streams + t * N * D, pre.data(), N, D, y + t * D);
  }
}

}  // namespace nibble
