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

namespace {

// One sequence's window keys, compressed-entry selection and attention core:
// q [count, H, d] and kv [count, d] of its new tokens -> o [count, H, d].
// Also appends its rows to the compressors and its kv to the ring.
void attend_one(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope, const AttnSeq& seq,
                const float* q, const float* kv, const float* comp_kv, const float* comp_score,
                const IndexerProjections* idx, float* o, ThreadPool* pool) {
  const int64_t H = s.heads, d = s.head_dim, W = s.window, n = seq.count, p0 = seq.p0;
  AttentionState& st = *seq.st;
  const int64_t ring_rows = W + s.rollback;

  // Window keys in position order: the ring's last W-1 tokens before p0, then the new ones.
  const int64_t first = std::max<int64_t>(0, p0 - (W - 1));
  const int64_t n_old = p0 - first;
  std::vector<float> keys(size_t((n_old + n) * d));
  for (int64_t p = first; p < p0; ++p)
    std::copy(st.ring.begin() + (p % ring_rows) * d, st.ring.begin() + (p % ring_rows + 1) * d,
              keys.begin() + (p - first) * d);
  std::copy(kv, kv + n * d, keys.begin() + n_old * d);

  // Compressed entries (all of this call's windows close before any query reads them).
  IndexerSelection sel;
  if (w.compressor) {
    PhaseTimer _(Phase::compressor);
    const int64_t width = w.compressor->width();
    compressor_append(*w.compressor, compress_rope, s.rms_eps, comp_kv + seq.first * width,
                      comp_score + seq.first * width, n, p0, s.rollback, st.compressor);
  }
  if (w.indexer) {
    PhaseTimer _(Phase::indexer);
    indexer_select(*w.indexer, compress_rope, s.rms_eps, *idx, seq.first, n, p0, s.rollback, st.indexer, sel, pool);
  }
  if (w.indexer && st.indexer.n_entries != st.compressor.n_entries)
    fail("CSA layer: indexer and compressor disagree on the number of windows");
  const int64_t ratio = w.compressor ? w.compressor->ratio : 0;

  // Attention per (token, head); each (token, head) is computed whole by one
  // thread, in key order.
  const float scale = 1.0f / std::sqrt(float(d));
  PhaseTimer core_timer(Phase::attn_core);
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
      const float* qh = q + (t * H + h) * d;
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
      float* oh = o + (t * H + h) * d;
      const float inv = 1.0f / denom;
      for (int64_t c = 0; c < d; ++c) oh[c] = acc[size_t(c)] * inv;
    }
  });

  // Remember the newest kv rows for the next step's window.
  st.ring.resize(size_t(ring_rows * d));
  for (int64_t t = std::max<int64_t>(0, n - ring_rows); t < n; ++t)
    std::copy(kv + t * d, kv + (t + 1) * d, st.ring.begin() + ((p0 + t) % ring_rows) * d);
  st.ring_high = std::max(st.ring_high, p0 + n);
}

}  // namespace

void attention_forward(const AttentionWeights& w, const AttentionShape& s, const RopeTable& rope,
                       const RopeTable& compress_rope, const float* x, int64_t T, const int64_t* positions,
                       std::span<const AttnSeq> seqs, float* out, ThreadPool* pool) {
  const int64_t H = s.heads, d = s.head_dim;

  // Queries of every token: [T, H, d].
  std::vector<float> qr(size_t(T * s.q_lora)), q(size_t(T * H * d));
  {
    PhaseTimer _(Phase::attn_linear);
    w.wq_a.run(x, T, qr.data(), pool);
  }
  rms_norm(qr.data(), T, s.q_lora, w.q_norm.data(), s.rms_eps, qr.data());
  {
    PhaseTimer _(Phase::attn_linear);
    w.wq_b.run(qr.data(), T, q.data(), pool);
  }
  rms_norm(q.data(), T * H, d, nullptr, s.rms_eps, q.data());
  for (int64_t t = 0; t < T; ++t) rope.apply(q.data() + t * H * d, H, d, positions[t], false);

  // The shared key/value head of every token: [T, d].
  std::vector<float> kv(size_t(T * d));
  {
    PhaseTimer _(Phase::attn_linear);
    w.wkv.run(x, T, kv.data(), pool);
  }
  rms_norm(kv.data(), T, d, w.kv_norm.data(), s.rms_eps, kv.data());
  for (int64_t t = 0; t < T; ++t) rope.apply(kv.data() + t * d, 1, d, positions[t], false);

  // The compressors' and the indexer's projections, once over all tokens.
  std::vector<float> comp_kv, comp_score;
  if (w.compressor) {
    PhaseTimer _(Phase::compressor);
    comp_kv.resize(size_t(T * w.compressor->width()));
    comp_score.resize(comp_kv.size());
    compressor_project(*w.compressor, x, T, comp_kv.data(), comp_score.data(), pool);
  }
  IndexerProjections idx;
  if (w.indexer) {
    PhaseTimer _(Phase::indexer);
    indexer_project(*w.indexer, compress_rope, x, qr.data(), positions, T, idx, pool);
  }

  // Per sequence: its window, compressed entries and attention core.
  std::vector<float> o(size_t(T * H * d));
  for (const AttnSeq& seq : seqs)
    attend_one(w, s, compress_rope, seq, q.data() + seq.first * H * d, kv.data() + seq.first * d, comp_kv.data(),
               comp_score.data(), w.indexer ? &idx : nullptr, o.data() + seq.first * H * d, pool);

  // V carried RoPE: rotate the output back by the query's angle.
  for (int64_t t = 0; t < T; ++t) rope.apply(o.data() + t * H * d, H, d, positions[t], /*inverse=*/true);

  std::vector<float> y(size_t(T * s.o_groups * s.o_lora));
  {
    PhaseTimer _(Phase::attn_linear);
    grouped_wo_a(w.wo_a, s, o.data(), T, y.data(), pool);
    w.wo_b.run(y.data(), T, out, pool);
  }
}

int64_t attention_truncate_floor(const AttentionWeights& w, const AttentionShape& s, const AttentionState& st) {
  // The window before position p must not have been overwritten in the ring:
  // row p' % rows was last written by a position < ring_high.
  int64_t floor = std::max<int64_t>(0, st.ring_high - s.rollback);
  if (w.compressor) floor = std::max(floor, st.compressor.truncate_floor(*w.compressor));
  if (w.indexer) floor = std::max(floor, st.indexer.truncate_floor(w.indexer->compressor));
  return floor;
}

void attention_truncate(const AttentionWeights& w, AttentionState& st, int64_t p) {
  if (w.compressor) st.compressor.truncate(*w.compressor, p);
  if (w.indexer) st.indexer.truncate(w.indexer->compressor, p);
}

}  // namespace nibble
