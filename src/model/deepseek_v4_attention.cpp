#include "model/deepseek_v4_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "model/forward_profile.h"
#include "runtime/thread_pool.h"
#include "util/error.h"

namespace nibble {

namespace {

// The grouped output projection: o [n, H*d] -> y [n, G*o_lora]. Group g's
// slice o[:, g*Cg : (g+1)*Cg] meets rows g*o_lora .. of wo_a.
void grouped_wo_a(const BoundLinear& wo_a, const AttentionShape& s, const float* o, int64_t n, float* y,
                  ThreadPool* pool) {
  const int64_t G = s.o_groups, R = s.o_lora, Cg = s.heads * s.head_dim / G;
  std::vector<float> xg(size_t(n * Cg)), yg(size_t(n * R)), full;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t)
      std::copy(o + t * s.heads * s.head_dim + g * Cg, o + t * s.heads * s.head_dim + (g + 1) * Cg,
                xg.begin() + t * Cg);
    if (auto view = row_slice(wo_a.w, g * R, R)) {
      wo_a.fn(*view, xg.data(), n, yg.data(), pool);
      for (int64_t t = 0; t < n; ++t) std::copy(yg.begin() + t * R, yg.begin() + (t + 1) * R, y + t * G * R + g * R);
    } else {
      // A format that cannot address the group's rows alone (FP8 tiles that
      // straddle groups): multiply by the whole matrix and keep the group's rows.
      full.resize(size_t(n * G * R));
      wo_a.run(xg.data(), n, full.data(), pool);
      for (int64_t t = 0; t < n; ++t)
        std::copy(full.begin() + t * G * R + g * R, full.begin() + t * G * R + (g + 1) * R, y + t * G * R + g * R);
    }
  }
}

}  // namespace

void attention_forward(const AttentionWeights& w, const AttentionShape& s, const RopeTable& rope,
                       const RopeTable& compress_rope, const float* x, int64_t n, int64_t p0, AttentionState& st,
                       float* out, ThreadPool* pool) {
  const int64_t H = s.heads, d = s.head_dim, W = s.window;

  // Queries: [n, H, d].
  std::vector<float> qr(size_t(n * s.q_lora)), q(size_t(n * H * d));
  {
    PhaseTimer _(Phase::attn_linear);
    w.wq_a.run(x, n, qr.data(), pool);
  }
  rms_norm(qr.data(), n, s.q_lora, w.q_norm.data(), s.rms_eps, qr.data());
  {
    PhaseTimer _(Phase::attn_linear);
    w.wq_b.run(qr.data(), n, q.data(), pool);
  }
  rms_norm(q.data(), n * H, d, nullptr, s.rms_eps, q.data());
  for (int64_t t = 0; t < n; ++t) rope.apply(q.data() + t * H * d, H, d, p0 + t, false);

  // The shared key/value head of the new tokens: [n, d].
  std::vector<float> kv(size_t(n * d));
  {
    PhaseTimer _(Phase::attn_linear);
    w.wkv.run(x, n, kv.data(), pool);
  }
  rms_norm(kv.data(), n, d, w.kv_norm.data(), s.rms_eps, kv.data());
  for (int64_t t = 0; t < n; ++t) rope.apply(kv.data() + t * d, 1, d, p0 + t, false);

  // Window keys in position order: the ring's last W-1 tokens before p0, then the new ones.
  const int64_t first = std::max<int64_t>(0, p0 - (W - 1));
  const int64_t n_old = p0 - first;
  std::vector<float> keys(size_t((n_old + n) * d));
  for (int64_t p = first; p < p0; ++p)
    std::copy(st.ring.begin() + (p % W) * d, st.ring.begin() + (p % W + 1) * d, keys.begin() + (p - first) * d);
  std::copy(kv.begin(), kv.end(), keys.begin() + n_old * d);

  // Compressed entries (all of this call's windows close before any query reads them).
  IndexerSelection sel;
  if (w.compressor) {
    PhaseTimer _(Phase::compressor);
    compressor_forward(*w.compressor, compress_rope, s.rms_eps, x, n, p0, st.compressor, pool);
  }
  if (w.indexer) {
    PhaseTimer _(Phase::indexer);
    indexer_forward(*w.indexer, compress_rope, s.rms_eps, x, qr.data(), n, p0, st.indexer, sel, pool);
  }
  if (w.indexer && st.indexer.n_entries != st.compressor.n_entries)
    fail("CSA layer: indexer and compressor disagree on the number of windows");
  const int64_t ratio = w.compressor ? w.compressor->ratio : 0;

  // Attention per (token, head).
  std::vector<float> o(size_t(n * H * d));
  const float scale = 1.0f / std::sqrt(float(d));
  std::optional<PhaseTimer> core_timer(Phase::attn_core);
  pool_for(pool, n * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<const float*> kp;
    std::vector<float> logit, acc(static_cast<size_t>(d));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / H, h = i % H, pos = p0 + t;
      kp.clear();
      for (int64_t p = std::max<int64_t>(first, pos - W + 1); p <= pos; ++p) kp.push_back(keys.data() + (p - first) * d);
      if (w.kind == AttnKind::hca) {
        const int64_t visible = std::min((pos + 1) / ratio, st.compressor.n_entries);
        for (int64_t e = 0; e < visible; ++e) kp.push_back(st.compressor.entries.data() + e * d);
      } else if (w.kind == AttnKind::csa) {
        for (int32_t k = 0; k < sel.count[size_t(t)]; ++k)
          kp.push_back(st.compressor.entries.data() + int64_t(sel.entries[size_t(t * sel.topk + k)]) * d);
      }
      // softmax over [scores | sink] (HF concatenates the sink as one more
      // logit and drops its probability); V = K.
      const float* qh = q.data() + (t * H + h) * d;
      logit.resize(kp.size());
      float mx = w.sink[size_t(h)];
      for (size_t j = 0; j < kp.size(); ++j) {
        logit[j] = dot_f32(qh, kp[j], d) * scale;
        mx = std::max(mx, logit[j]);
      }
      float denom = std::exp(w.sink[size_t(h)] - mx);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t j = 0; j < kp.size(); ++j) {
        const float p = std::exp(logit[j] - mx);
        denom += p;
        axpy_f32(p, kp[j], acc.data(), d);
      }
      float* oh = o.data() + (t * H + h) * d;
      const float inv = 1.0f / denom;
      for (int64_t c = 0; c < d; ++c) oh[c] = acc[size_t(c)] * inv;
    }
  });
  core_timer.reset();

  // V carried RoPE: rotate the output back by the query's angle.
  for (int64_t t = 0; t < n; ++t) rope.apply(o.data() + t * H * d, H, d, p0 + t, /*inverse=*/true);

  std::vector<float> y(size_t(n * s.o_groups * s.o_lora));
  {
    PhaseTimer _(Phase::attn_linear);
    grouped_wo_a(w.wo_a, s, o.data(), n, y.data(), pool);
    w.wo_b.run(y.data(), n, out, pool);
  }

  // Remember the newest kv rows for the next call's window.
  st.ring.resize(size_t(W * d));
  for (int64_t t = std::max<int64_t>(0, n - W); t < n; ++t)
    std::copy(kv.begin() + t * d, kv.begin() + (t + 1) * d, st.ring.begin() + ((p0 + t) % W) * d);
}

}  // namespace nibble
