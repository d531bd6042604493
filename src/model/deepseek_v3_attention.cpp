#include "model/deepseek_v3_attention.h"

#include <algorithm>
#include <cmath>

#include "device/device.h"
#include "kernels/cpu/kernels_x86.h"
#include "model/mla_items.h"
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

// The SIMD path: one work item per (token, slice of heads) (model/mla_items.h),
// run by the kernels of kernels/cpu/mla_*.cpp.
void attend_simd(void (*item_fn)(const x86::MlaItem&), const MlaShape& s, const float* kv_b, const MlaSeq& seq,
                 const float* q, const float* L, const float* KR, float* o, ThreadPool* pool) {
  const int64_t N = s.nope, Vd = s.v, H = s.heads, qw = s.q_width();
  x86::MlaItem proto{};
  proto.latent = s.latent, proto.rope = s.rope, proto.nope = N, proto.v = Vd, proto.scale = s.scale;
  proto.q_stride = qw, proto.latent_cache = L, proto.k_rope_cache = KR;
  run_mla_items(item_fn, proto, seq.count, H, seq.position + seq.count, pool,
                [&](x86::MlaItem& it, int64_t t, int64_t h0, int) {
                  it.q = q + t * H * qw + h0 * qw;
                  it.kv_b = kv_b + h0 * (N + Vd) * s.latent;
                  it.rows = seq.position + t + 1;
                  it.o = o + t * H * Vd + h0 * Vd;
                });
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
