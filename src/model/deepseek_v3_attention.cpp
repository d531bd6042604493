#include "model/deepseek_v3_attention.h"

#include <algorithm>
#include <cmath>

#include "model/ops.h"
#include "util/error.h"

namespace nibble {

void mla_attend_cpu(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* latent,
                    const float* k_rope, float* o, ThreadPool* pool) {
  const int64_t C = s.latent, R = s.rope, N = s.nope, Vd = s.v, H = s.heads, qw = s.q_width();
  MlaCache& c = *seq.cache;
  if (c.rows(C) != seq.position || int64_t(c.k_rope.size()) != seq.position * R)
    fail("DeepSeek-V3 attention: the cache holds ", c.rows(C), " positions but the sequence is at ", seq.position);
  c.latent.insert(c.latent.end(), latent, latent + seq.count * C);
  c.k_rope.insert(c.k_rope.end(), k_rope, k_rope + seq.count * R);
  const float* L = c.latent.data();
  const float* KR = c.k_rope.data();
  // One work item per (token, head), each writing its own o slice: the
  // result does not depend on the split (batch invariance).
  pool_for(pool, seq.count * H, 2, [&](int64_t a, int64_t b) {
    std::vector<float> q_abs(static_cast<size_t>(C)), ctx(static_cast<size_t>(C)), p;
    for (int64_t item = a; item < b; ++item) {
      const int64_t t = item / H, h = item % H, pos = seq.position + t;
      const float* qh = q + t * H * qw + h * qw;  // [nope | rope]
      const float* wk = kv_b + h * (N + Vd) * C;  // W_UK_h [N, C]
      const float* wv = wk + N * C;               // W_UV_h [Vd, C]
      // q_abs = W_UK_h^T q_nope: rows of W_UK_h weighted by q_nope.
      std::fill(q_abs.begin(), q_abs.end(), 0.0f);
      for (int64_t i = 0; i < N; ++i) axpy_f32(qh[i], wk + i * C, q_abs.data(), C);
      p.resize(size_t(pos + 1));
      float m = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        const float sc = (dot_f32(q_abs.data(), L + j * C, C) + dot_f32(qh + N, KR + j * R, R)) * s.scale;
        p[size_t(j)] = sc;
        m = std::max(m, sc);
      }
      float sum = 0.0f;
      for (float& x : p) sum += (x = std::exp(x - m));
      std::fill(ctx.begin(), ctx.end(), 0.0f);
      for (int64_t j = 0; j <= pos; ++j) axpy_f32(p[size_t(j)] / sum, L + j * C, ctx.data(), C);
      float* oh = o + t * H * Vd + h * Vd;
      for (int64_t i = 0; i < Vd; ++i) oh[i] = dot_f32(wv + i * C, ctx.data(), C);
    }
  });
}

}  // namespace nibble
