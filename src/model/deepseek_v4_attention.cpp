#include "model/deepseek_v4_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "device/device.h"
#include "model/backend.h"
#include "model/forward_profile.h"
#include "model/mla_items.h"
#include "model/ops.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

// The grouped output projection: o [n, H*d] -> y [n, G*o_lora]. Group g's
// slice o[:, g*Cg : (g+1)*Cg] meets rows g*o_lora .. of wo_a.
void grouped_wo_a_cpu(const BoundLinear& wo_a, const AttentionShape& s, const float* o, int64_t n, float* y,
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

AttentionShape deepseek_v4_attention_shape(const DeepseekV4Config& c, int64_t rollback) {
  return AttentionShape{c.hidden,   c.n_heads,     c.head_dim,       c.rope_dim, c.q_lora_rank,
                        c.o_groups, c.o_lora_rank, c.sliding_window, c.rms_eps,  rollback};
}

std::vector<WeightView> wo_a_group_slices(const WeightView& wo_a, const AttentionShape& s) {
  std::vector<WeightView> slices;
  for (int64_t g = 0; g < s.o_groups; ++g) {
    auto view = row_slice(wo_a, g * s.o_lora, s.o_lora);
    if (!view) return {};
    slices.push_back(*view);
  }
  return slices;
}

// One sequence's window keys, compressed-entry selection and attention core:
// q [count, H, d] and kv [count, d] of its new tokens -> o [count, H, d].
// Also appends its rows to the compressors and its kv to the ring.
void attend_cpu(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope, const AttnSeq& seq,
                const float* q, const float* kv, const float* comp_kv, const float* comp_score,
                const IndexerProjections* idx, float* o, ThreadPool* pool, ForwardProfile* prof, CpuIsa isa) {
  if (std::string why = cpu_isa_unsupported(isa, host_cpu_features()); !why.empty())
    fail("DeepSeek-V4 attention: this CPU cannot run the ", cpu_isa_name(isa), " kernels: ", why);
  const int64_t H = s.heads, d = s.head_dim, W = s.window, n = seq.count, p0 = seq.p0;
  AttentionState& st = host_attention_state(seq);
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
    PhaseTimer _(prof, Phase::compressor);
    const int64_t width = w.compressor->width();
    compressor_append(*w.compressor, compress_rope, s.rms_eps, comp_kv + seq.first * width,
                      comp_score + seq.first * width, n, p0, s.rollback, st.compressor);
  }
  if (w.indexer) {
    PhaseTimer _(prof, Phase::indexer);
    indexer_select(*w.indexer, compress_rope, s.rms_eps, *idx, seq.first, n, p0, s.rollback, st.indexer, sel, pool,
                   isa);
  }
  if (w.indexer && st.indexer.n_entries != st.compressor.n_entries)
    fail("CSA layer: indexer and compressor disagree on the number of windows");
  const int64_t ratio = w.compressor ? w.compressor->ratio : 0;

  // Token t's keys (= values) in the order the sums take them: its window in
  // position order, then the compressed entries it sees (HCA: every closed
  // window; CSA: the indexer's picks in its order).
  auto key_rows = [&](int64_t t, std::vector<const float*>& kp) {
    const int64_t pos = p0 + t;
    kp.clear();
    for (int64_t p = std::max<int64_t>(first, pos - W + 1); p <= pos; ++p) kp.push_back(keys.data() + (p - first) * d);
    if (w.kind == AttnKind::hca) {
      const int64_t visible = std::min((pos + 1) / ratio, st.compressor.n_entries);
      for (int64_t e = 0; e < visible; ++e) kp.push_back(st.compressor.entries.data() + e * d);
    } else if (w.kind == AttnKind::csa) {
      for (int32_t k = 0; k < sel.count[size_t(t)]; ++k)
        kp.push_back(st.compressor.entries.data() + int64_t(sel.entries[size_t(t * sel.topk + k)]) * d);
    }
  };
  const float scale = 1.0f / std::sqrt(float(d));
  PhaseTimer core_timer(prof, Phase::attn_core);
  if (isa == CpuIsa::ref) {
    // Per (token, head), computed whole by one thread, in key order.
    pool_for(pool, n * H, 1, [&](int64_t i0, int64_t i1) {
      std::vector<const float*> kp;
      std::vector<float> logit, acc(static_cast<size_t>(d));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / H, h = i % H;
        key_rows(t, kp);
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
  } else {
    // The latent-attention kernels with keys = values and no absorption
    // (kernels_x86.h), per (token, slice of heads): each row loaded serves 8
    // heads. Per thread, the pointer list of the token its item is on.
    x86::MlaItem proto{};
    proto.latent = d, proto.v = d, proto.scale = scale, proto.q_stride = d;
    int64_t max_rows = 0;
    std::vector<const float*> probe;
    for (int64_t t = 0; t < n; ++t) key_rows(t, probe), max_rows = std::max<int64_t>(max_rows, int64_t(probe.size()));
    const int64_t workers = pool ? pool->size() : 1;
    std::vector<std::vector<const float*>> kp{size_t(workers)};
    std::vector<int64_t> kp_token(size_t(workers), -1);
    auto item_fn = isa == CpuIsa::avx512 ? x86::mla_item_avx512 : x86::mla_item_avx2;
    run_mla_items(item_fn, proto, n, H, max_rows, pool, [&](x86::MlaItem& it, int64_t t, int64_t h0, int worker) {
      const size_t me = size_t(worker);
      if (kp_token[me] != t) key_rows(t, kp[me]), kp_token[me] = t;
      it.row_ptrs = kp[me].data();
      it.rows = int64_t(kp[me].size());
      it.q = q + (t * H + h0) * d;
      it.o = o + (t * H + h0) * d;
      it.sinks = w.sink.data() + h0;
    });
  }

  // Remember the newest kv rows for the next step's window.
  st.ring.resize(size_t(ring_rows * d));
  for (int64_t t = std::max<int64_t>(0, n - ring_rows); t < n; ++t)
    std::copy(kv + t * d, kv + (t + 1) * d, st.ring.begin() + ((p0 + t) % ring_rows) * d);
  st.ring_high = std::max(st.ring_high, p0 + n);
}

void attention_forward(Backend& be, const AttentionWeights& w, const AttentionShape& s, const RopeTable& rope,
                       const RopeTable& compress_rope, Tensor x, std::span<const int64_t> positions,
                       std::span<const AttnSeq> seqs, Tensor out) {
  const int64_t T = x.rows, H = s.heads, d = s.head_dim;
  const size_t mark = be.mark();

  // Queries of every token: [T, H*d], per-head unweighted norm, RoPE.
  Tensor qr = be.alloc(T, s.q_lora), q = be.alloc(T, H * d);
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.linear(w.wq_a, x, qr);
  }
  be.rms_norm(qr, w.q_norm.data(), s.rms_eps, qr);
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.linear(w.wq_b, qr, q);
  }
  be.rms_norm(q.reshaped(d), nullptr, s.rms_eps, q.reshaped(d));
  be.rope(rope, q, H, positions, false);

  // The shared key/value head of every token: [T, d].
  Tensor kv = be.alloc(T, d);
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.linear(w.wkv, x, kv);
  }
  be.rms_norm(kv, w.kv_norm.data(), s.rms_eps, kv);
  be.rope(rope, kv, 1, positions, false);

  // The compressors' and the indexer's projections, once over all tokens.
  Tensor comp_kv, comp_score;
  if (w.compressor) {
    PhaseTimer _(be.profile(), Phase::compressor);
    comp_kv = be.alloc(T, w.compressor->width());
    comp_score = be.alloc(T, w.compressor->width());
    be.linear(w.compressor->wkv, x, comp_kv);
    be.linear(w.compressor->wgate, x, comp_score);
  }
  // The indexer's: its compressor's rows, its RoPE'd queries from the
  // low-rank query, its per-head weights.
  IndexerProjections idx;
  if (w.indexer) {
    PhaseTimer _(be.profile(), Phase::indexer);
    const IndexerWeights& iw = *w.indexer;
    Tensor ikv = be.alloc(T, iw.compressor.width()), iscore = be.alloc(T, iw.compressor.width());
    Tensor iq = be.alloc(T, iw.heads * iw.dim), ihw = be.alloc(T, iw.heads);
    be.linear(iw.compressor.wkv, x, ikv);
    be.linear(iw.compressor.wgate, x, iscore);
    be.linear(iw.wq_b, qr, iq);
    be.linear(iw.weights_proj, x, ihw);
    be.rope(compress_rope, iq, iw.heads, positions, false);
    idx = IndexerProjections{ikv.data, iscore.data, iq.data, ihw.data};
  }

  // Per sequence: its window, compressed entries and attention core.
  Tensor o = be.alloc(T, H * d);
  for (const AttnSeq& seq : seqs)
    be.attend(w, s, compress_rope, seq, q.slice(seq.first, seq.count), kv.slice(seq.first, seq.count), comp_kv,
              comp_score, w.indexer ? &idx : nullptr, o.slice(seq.first, seq.count));

  // V carried RoPE: rotate the output back by the query's angle.
  be.rope(rope, o, H, positions, /*inverse=*/true);

  Tensor y = be.alloc(T, s.o_groups * s.o_lora);
  {
    PhaseTimer _(be.profile(), Phase::attn_linear);
    be.grouped_wo_a(w.wo_a, s, o, y);
    be.linear(w.wo_b, y, out);
  }
  be.release_to(mark);
}

AttentionState& host_attention_state(const AttnSeq& seq) {
  return host_cache<HostAttentionCache>(seq.cache, "attention").state;
}

int64_t HostAttentionCache::truncate_floor() const {
  // The window before position p must not have been overwritten in the ring:
  // row p' % rows was last written by a position < ring_high.
  int64_t floor = std::max<int64_t>(0, state.ring_high - s_.rollback);
  if (w_->compressor) floor = std::max(floor, state.compressor.truncate_floor(*w_->compressor));
  if (w_->indexer) floor = std::max(floor, state.indexer.truncate_floor(w_->indexer->compressor));
  return floor;
}

void HostAttentionCache::truncate(int64_t p) {
  if (w_->compressor) state.compressor.truncate(*w_->compressor, p);
  if (w_->indexer) state.indexer.truncate(w_->indexer->compressor, p);
}

}  // namespace nibble
