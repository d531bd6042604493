#include "model/gpt_oss_attention.h"

#include <algorithm>
#include <cmath>

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

void gqa_attend_cpu(const GqaShape& s, const float* sinks, const GqaSeq& seq, const float* q, const float* k,
                    const float* v, float* o, ThreadPool* pool) {
  const int64_t d = s.head_dim, kvw = s.kv_heads * d, qw = s.heads * d, group = s.heads / s.kv_heads;
  KvCache& c = *seq.cache;
  if (c.rows(kvw) != seq.position)
    fail("gpt-oss attention: the cache holds ", c.rows(kvw), " positions but the sequence is at ", seq.position);
  c.k.insert(c.k.end(), k, k + seq.count * kvw);
  c.v.insert(c.v.end(), v, v + seq.count * kvw);
  const float scale = 1.0f / std::sqrt(float(d));  // HF: head_dim ** -0.5 (a python float, then f32)
  const float* K = c.k.data();
  const float* V = c.v.data();
  // One work item per (token, head): each writes its own o row slice, so the
  // result does not depend on the split (batch invariance).
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
        const float sc = dot_f32(qh, K + j * kvw + g * d, d) * scale;
        p[size_t(j - lo)] = sc;
        m = std::max(m, sc);
      }
      float sum = std::exp(sinks[h] - m);
      for (float& x : p) sum += (x = std::exp(x - m));
      float* oh = o + t * qw + h * d;
      std::fill(oh, oh + d, 0.0f);
      for (int64_t j = lo; j <= pos; ++j) axpy_f32(p[size_t(j - lo)] / sum, V + j * kvw + g * d, oh, d);
    }
  });
}

}  // namespace nibble
