#include "model/deepseek_v3_attention.h"

#include <algorithm>
#include <cmath>

#include "device/device.h"
#include "kernels/cpu/kernels_x86.h"
#include "model/ops.h"
#include "util/error.h"

namespace nibble {
namespace {

// The portable path: one work item per (token, head), each writing its own o
// slice and reading the whole cache twice (scores, then ctx).
void attend_ref(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* L,
                const float* KR, float* o, ThreadPool* pool) {
  const int64_t C = s.latent, R = s.rope, N = s.nope, Vd = s.v, H = s.heads, qw = s.q_width();
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

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The SIMD path: one work item per (token, slice of heads), run by the
// kernels of kernels/cpu/mla_*.cpp. An item reads the cache twice whatever
// its head count, so slices are as wide as still gives every thread an item
// (a decode step of one token on 2 threads: two halves of the heads), in
// whole groups of kMlaGroup. The slicing may follow the thread count because
// no output depends on it: each head's arithmetic is the same whichever
// item and group it falls in (kernels_x86.h), so every output is the same
// whatever the batch and the split (tests/model/deepseek_v3_attention_test).
void attend_simd(void (*item_fn)(const x86::MlaItem&), const MlaShape& s, const float* kv_b, const MlaSeq& seq,
                 const float* q, const float* L, const float* KR, float* o, ThreadPool* pool) {
  const int64_t C = s.latent, R = s.rope, N = s.nope, Vd = s.v, H = s.heads, qw = s.q_width();
  const int64_t G = x86::kMlaGroup, ld = round_up(C, 32), ldr = round_up(R, 16);
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t splits = std::max<int64_t>(1, (threads + seq.count - 1) / seq.count);
  const int64_t slice = std::min(round_up(H, G), round_up((H + splits - 1) / splits, G));
  const int64_t slices = (H + slice - 1) / slice, groups = slice / G;
  const int64_t items = seq.count * slices;
  // Thread i takes items i, i + n, i + 2n, ...: in a prefill chunk later
  // tokens see more rows, so contiguous ranges would leave the first thread
  // with the cheap early tokens (3:1 for a chunk from position 0); dealt
  // round-robin, every thread gets the same mix.
  auto work = [&](int64_t first, int64_t step) {
    if (first >= items) return;
    // Items are token-major: the thread's last item's token sees the most rows.
    const int64_t last = first + (items - 1 - first) / step * step;
    const int64_t rows_max = seq.position + last / slices + 1;
    const int64_t floats = slice * (2 * ld + ldr + 16) + groups * round_up(rows_max, 2) * G;
    std::vector<float> buf(size_t(floats + 16));
    float* base = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float)) % 16) % 16;
    x86::MlaItem it{};
    it.latent = C, it.rope = R, it.nope = N, it.v = Vd, it.scale = s.scale, it.q_stride = qw;
    it.latent_cache = L, it.k_rope_cache = KR, it.ld = ld, it.ldr = ldr;
    it.q_abs = base, it.ctx = base + slice * ld, it.q_rope = base + 2 * slice * ld;
    it.inv_sum = it.q_rope + slice * ldr, it.scores = it.inv_sum + slice * 16;
    for (int64_t item = first; item < items; item += step) {
      const int64_t t = item / slices, h0 = item % slices * slice;
      it.heads = std::min(slice, H - h0);
      it.q = q + t * H * qw + h0 * qw;
      it.kv_b = kv_b + h0 * (N + Vd) * C;
      it.rows = seq.position + t + 1;
      it.o = o + t * H * Vd + h0 * Vd;
      item_fn(it);
    }
  };
  if (!pool || pool->size() <= 1 || items < 2) work(0, 1);
  else pool->run([&](int i, int n) { work(i, n); });
}

}  // namespace

void mla_attend_cpu(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* latent,
                    const float* k_rope, float* o, ThreadPool* pool, CpuIsa isa) {
  const int64_t C = s.latent, R = s.rope;
  if (std::string why = cpu_isa_unsupported(isa, host_cpu_features()); !why.empty())
    fail("DeepSeek-V3 attention: this CPU cannot run the ", cpu_isa_name(isa), " kernels: ", why);
  MlaCache& c = host_cache<HostMlaCache>(seq.cache, "DeepSeek-V3 attention").cache;
  if (c.rows(C) != seq.position || int64_t(c.k_rope.size()) != seq.position * R)
    fail("DeepSeek-V3 attention: the cache holds ", c.rows(C), " positions but the sequence is at ", seq.position);
  c.latent.insert(c.latent.end(), latent, latent + seq.count * C);
  c.k_rope.insert(c.k_rope.end(), k_rope, k_rope + seq.count * R);
  const float* L = c.latent.data();
  const float* KR = c.k_rope.data();
  switch (isa) {
    case CpuIsa::ref: return attend_ref(s, kv_b, seq, q, L, KR, o, pool);
    case CpuIsa::avx2: return attend_simd(x86::mla_item_avx2, s, kv_b, seq, q, L, KR, o, pool);
    case CpuIsa::avx512: return attend_simd(x86::mla_item_avx512, s, kv_b, seq, q, L, KR, o, pool);
  }
}

void mla_attend_cpu(const MlaShape& s, const float* kv_b, const MlaSeq& seq, const float* q, const float* latent,
                    const float* k_rope, float* o, ThreadPool* pool) {
  static const CpuIsa best = best_cpu_isa(host_cpu_features());
  mla_attend_cpu(s, kv_b, seq, q, latent, k_rope, o, pool, best);
}

void HostMlaCache::truncate(int64_t p) {
  if (p < 0 || p > cache.rows(s_.latent))
    fail("DeepSeek-V3 attention: truncate to ", p, " but the cache holds ", cache.rows(s_.latent), " positions");
  cache.latent.resize(size_t(p * s_.latent));
  cache.k_rope.resize(size_t(p * s_.rope));
}

}  // namespace nibble
