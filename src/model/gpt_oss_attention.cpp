#include "model/gpt_oss_attention.h"

#include <algorithm>
#include <cmath>

#include "device/device.h"
#include "model/mla_items.h"
#include "model/ops.h"
#include "util/error.h"

namespace nibble {

void rope_half_split(const RopeTable& table, float* x, int64_t rows, int64_t heads, int64_t d,
                     const int64_t* positions) {
  const int64_t half = d / 2;
  if (table.rope_dim() != d) fail("gpt-oss RoPE: table of width ", table.rope_dim(), " for heads of ", d);
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int64_t t = 0; t < rows; ++t) {
    table.angles(positions[t], c.data(), s.data());
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[half + i];
        v[i] = x1 * c[size_t(i)] - x2 * s[size_t(i)];
        v[half + i] = x2 * c[size_t(i)] + x1 * s[size_t(i)];
      }
    }
  }
}

int64_t KvCache::truncate_floor(int64_t window) const {
  if (ring == 0 || oldest == 0) return 0;
  return std::min(fed, oldest + window - 1);
}

void KvCache::truncate(int64_t position, int64_t width, int64_t window) {
  if (position < truncate_floor(window) || position > fed)
    fail("gpt-oss attention: truncate to ", position, " but the cache reaches ", truncate_floor(window), " .. ", fed);
  if (ring == 0) {
    k.resize(size_t(position * width));
    v.resize(size_t(position * width));
  }
  fed = position;
}

void gqa_attend_cpu(const GqaShape& s, const float* sinks, const GqaSeq& seq, const float* q, const float* k,
                    const float* v, float* o, ThreadPool* pool, CpuIsa isa) {
  if (std::string why = cpu_isa_unsupported(isa, host_cpu_features()); !why.empty())
    fail("gpt-oss attention: this CPU cannot run the ", cpu_isa_name(isa), " kernels: ", why);
  const int64_t d = s.head_dim, kvw = s.kv_heads * d, qw = s.heads * d, group = s.heads / s.kv_heads;
  KvCache& c = host_cache<HostGqaCache>(seq.cache, "gpt-oss attention").kv;
  if (c.fed != seq.position)
    fail("gpt-oss attention: the cache was fed ", c.fed, " positions but the sequence is at ", seq.position);
  if (c.ring > 0 && (s.window <= 0 || seq.count > c.ring - s.window + 1))
    fail("gpt-oss attention: a chunk of ", seq.count, " tokens does not fit a sliding ring of ", c.ring,
         " slots for a window of ", s.window);
  const int64_t slots = c.ring > 0 ? std::min(c.ring, c.fed + seq.count) : c.fed + seq.count;
  if (int64_t(c.k.size()) < slots * kvw) {
    c.k.resize(size_t(slots * kvw));
    c.v.resize(size_t(slots * kvw));
  }
  for (int64_t t = 0; t < seq.count; ++t) {
    const int64_t at = c.slot(seq.position + t) * kvw;
    std::copy(k + t * kvw, k + (t + 1) * kvw, c.k.begin() + at);
    std::copy(v + t * kvw, v + (t + 1) * kvw, c.v.begin() + at);
  }
  c.fed += seq.count;
  if (c.ring > 0) c.oldest = std::max(c.oldest, c.fed - c.ring);
  const float scale = 1.0f / std::sqrt(float(d));  // HF: head_dim ** -0.5 (a python float, then f32)
  const float* K = c.k.data();
  const float* V = c.v.data();
  if (isa == CpuIsa::ref) {
    // One work item per (token, head): each writes its own o row slice, so
    // the result does not depend on the split (batch invariance).
    pool_for(pool, seq.count * s.heads, 4, [&](int64_t a, int64_t b) {
      std::vector<float> p;
      for (int64_t item = a; item < b; ++item) {
        const int64_t t = item / s.heads, h = item % s.heads, g = h / group;
        const int64_t pos = seq.position + t;
        const int64_t lo = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
        const float* qh = q + t * qw + h * d;
        p.resize(size_t(pos + 1 - lo));
        float m = sinks[h];
        for (int64_t j = lo; j <= pos; ++j) {
          const float sc = dot_f32(qh, K + c.slot(j) * kvw + g * d, d) * scale;
          p[size_t(j - lo)] = sc;
          m = std::max(m, sc);
        }
        float sum = std::exp(sinks[h] - m);
        for (float& x : p) sum += (x = std::exp(x - m));
        float* oh = o + t * qw + h * d;
        std::fill(oh, oh + d, 0.0f);
        for (int64_t j = lo; j <= pos; ++j) axpy_f32(p[size_t(j - lo)] / sum, V + c.slot(j) * kvw + g * d, oh, d);
      }
    });
    return;
  }
  // Per (token, KV head), its `group` query heads: the keys' and values' row
  // pointers of that pair (in position order), built once per pair by the
  // thread that runs it.
  x86::MlaItem proto{};
  proto.latent = d, proto.v = d, proto.scale = scale, proto.q_stride = d;
  const int64_t last = seq.position + seq.count - 1;
  const int64_t max_rows = s.window > 0 ? std::min<int64_t>(s.window, last + 1) : last + 1;
  const int64_t workers = pool ? pool->size() : 1;
  std::vector<std::vector<const float*>> kp{size_t(workers)}, vp{size_t(workers)};
  std::vector<int64_t> built(size_t(workers), -1);
  auto item_fn = isa == CpuIsa::avx512 ? x86::mla_item_avx512 : x86::mla_item_avx2;
  run_mla_items(item_fn, proto, seq.count * s.kv_heads, group, max_rows, pool,
                [&](x86::MlaItem& it, int64_t pair, int64_t h0, int worker) {
                  const int64_t t = pair / s.kv_heads, g = pair % s.kv_heads, pos = seq.position + t;
                  const size_t me = size_t(worker);
                  if (built[me] != pair) {
                    kp[me].clear(), vp[me].clear();
                    for (int64_t j = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0; j <= pos; ++j) {
                      kp[me].push_back(K + c.slot(j) * kvw + g * d);
                      vp[me].push_back(V + c.slot(j) * kvw + g * d);
                    }
                    built[me] = pair;
                  }
                  it.row_ptrs = kp[me].data(), it.value_ptrs = vp[me].data(), it.rows = int64_t(kp[me].size());
                  const int64_t h = g * group + h0;  // the item's first query head
                  it.q = q + t * qw + h * d, it.o = o + t * qw + h * d, it.sinks = sinks + h;
                });
}

}  // namespace nibble
