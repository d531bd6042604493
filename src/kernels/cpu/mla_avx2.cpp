// The absorbed MLA attention of one token for an item of heads, AVX2 + FMA:
// the phases and cache-row blocks of mla_avx512.cpp (see there) with 8-lane
// vectors and the tiles cut to fit 16 ymm registers:
//   scores  4 heads x 2 rows = 8 accumulators (6 loads per 8 FMAs), the
//           group's two head halves in turn over the same row pair (the
//           second pass finds the rows in L1), one 8-to-1 reduction whose
//           lanes are the 8 scores (row j heads 4s..4s+3, row j+1 the same)
//   ctx     4 heads x 16 columns = 8 accumulators (2 loads + 4 broadcasts
//           per 8 FMAs)
// Summation order, fixed per head as in the AVX-512 file: dots lane-wise
// over C then r, then sum8's tree; the softmax sum in position order in one
// lane; ctx in position order lane by lane.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"

namespace nibble::x86 {
namespace {

constexpr int G = int(kMlaGroup);
static_assert(G == 8, "the score tile covers the group in two halves of 4 heads");
constexpr int64_t kScoreRows = 64;  // as in mla_avx512.cpp: 64 rows of C + r = 576 sit in L2
constexpr int64_t kCtxRows = 16;    // as in mla_avx512.cpp: accumulators reloaded once per 16 rows

inline int64_t groups_of(const MlaItem& it) { return (it.heads + G - 1) / G; }
inline int64_t rows2(const MlaItem& it) { return (it.rows + 1) / 2 * 2; }

// Row j's C floats, the C floats ctx sums for it, and its RoPE half (null
// without one), j < it.rows.
inline const float* row_at(const MlaItem& it, int64_t j) {
  return it.row_ptrs ? it.row_ptrs[j] : it.latent_cache + j * it.latent;
}
inline const float* value_at(const MlaItem& it, int64_t j) {
  return it.value_ptrs ? it.value_ptrs[j] : row_at(it, j);
}
inline const float* rope_at(const MlaItem& it, int64_t j) {
  return it.k_rope_cache ? it.k_rope_cache + j * it.rope : nullptr;
}

// Lanes [0, n) set (n clamped to [0, 8]), for maskload / maskstore.
inline __m256i lanes(int64_t n) {
  const int32_t k = n <= 0 ? 0 : n >= 8 ? 8 : int32_t(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Lane i = the sum of v[i]'s 8 lanes: hadd pairs within 128-bit halves
// twice (each half then holds v0..v3's, or v4..v7's, half sums), then the
// two halves added.
inline __m256 sum8(const __m256 (&v)[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// acc[r * 4 + h] += q_h . row_r over n floats, 4 query vectors x 2 rows.
// pf, unless its first is null: the next row pair, prefetched into L1 a line
// per 16 floats; pf2 likewise: a pair of the next block, into L2 (as in
// mla_avx512.cpp).
__attribute__((always_inline)) inline void dots_4x2(__m256 (&acc)[8], const float* q, int64_t ldq,
                                                    const float* row0, const float* row1, int64_t n,
                                                    const float* const (&pf)[2], const float* const (&pf2)[2]) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    if (pf[0] && k % 16 == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(pf[0] + k), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf[1] + k), _MM_HINT_T0);
    }
    if (pf2[0] && k % 16 == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(pf2[0] + k), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(pf2[1] + k), _MM_HINT_T1);
    }
    const __m256 r0 = _mm256_loadu_ps(row0 + k), r1 = _mm256_loadu_ps(row1 + k);
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m256 qv = _mm256_loadu_ps(q + h * ldq + k);
      __asm__("" : "+x"(qv));  // one load for both FMAs, not a memory operand in each (mla_avx512.cpp)
      acc[h] = _mm256_fmadd_ps(qv, r0, acc[h]);
      acc[4 + h] = _mm256_fmadd_ps(qv, r1, acc[4 + h]);
    }
  }
  if (k < n) {
    const __m256i m = lanes(n - k);
    const __m256 r0 = _mm256_maskload_ps(row0 + k, m), r1 = _mm256_maskload_ps(row1 + k, m);
    for (int h = 0; h < 4; ++h) {
      const __m256 qv = _mm256_maskload_ps(q + h * ldq + k, m);
      acc[h] = _mm256_fmadd_ps(qv, r0, acc[h]);
      acc[4 + h] = _mm256_fmadd_ps(qv, r1, acc[4 + h]);
    }
  }
}

// scores[grp][j * 8 + h]; an odd last row is paired with itself, its
// twin's lanes land in the padding row.
void scores(const MlaItem& it) {
  const int64_t C = it.latent, R = it.rope, groups = groups_of(it);
  const __m256 scale = _mm256_set1_ps(it.scale);
  for (int64_t b0 = 0; b0 < it.rows; b0 += kScoreRows) {
    const int64_t b1 = b0 + kScoreRows < it.rows ? b0 + kScoreRows : it.rows;
    for (int64_t grp = 0; grp < groups; ++grp) {
      float* S = it.scores + grp * rows2(it) * G;
      for (int64_t j = b0; j < b1; j += 2) {
        const int64_t j1 = j + 1 < it.rows ? j + 1 : j;
        // Prefetch targets clamped to the last row (row_ptrs ends there).
        auto row = [&](int64_t i) { return i < it.rows ? i : it.rows - 1; };
        const int64_t n0 = row(j + 2), n1 = row(j + 3), f0 = row(j + kScoreRows), f1 = row(j + kScoreRows + 1);
        for (int half = 0; half < 2; ++half) {
          const int64_t h0 = grp * G + half * 4;
          __m256 acc[8];
          for (__m256& a : acc) a = _mm256_setzero_ps();
          // Prefetches on the first half's pass only: the second finds the rows in L1.
          const bool pf = half == 0, pf2 = half == 0 && grp == 0;
          dots_4x2(acc, it.q_abs + h0 * it.ld, it.ld, row_at(it, j), row_at(it, j1), C,
                   {pf ? row_at(it, n0) : nullptr, row_at(it, n1)}, {pf2 ? row_at(it, f0) : nullptr, row_at(it, f1)});
          if (R > 0)
            dots_4x2(acc, it.q_rope + h0 * it.ldr, it.ldr, rope_at(it, j), rope_at(it, j1), R,
                     {pf ? rope_at(it, n0) : nullptr, rope_at(it, n1)},
                     {pf2 ? rope_at(it, f0) : nullptr, rope_at(it, f1)});
          const __m256 s = _mm256_mul_ps(sum8(acc), scale);
          _mm_storeu_ps(S + j * G + half * 4, _mm256_castps256_ps128(s));
          _mm_storeu_ps(S + (j + 1) * G + half * 4, _mm256_extractf128_ps(s, 1));
        }
      }
    }
  }
}

// exp(x) for x <= 0 as in mla_avx512.cpp (degree-7 Taylor after n ln2 is
// taken out); 2^n is built in the exponent field, valid since the clamp at
// -87.3 keeps n >= -126.
inline __m256 exp_le0(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// One group's scores S [rows, 8] -> exp(score - max) in place, and 1 / sum
// per head into inv[0..8). sinks, unless null: the 8 heads' sink logits,
// which join the max and add exp(sink - max) to the sum last.
void softmax(int64_t rows, float* S, float* inv, const float* sinks) {
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  for (int64_t j = 0; j < rows; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(S + j * G));
  if (sinks) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sinks));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < rows; ++j) {
    const __m256 e = exp_le0(_mm256_sub_ps(_mm256_loadu_ps(S + j * G), mx));
    _mm256_storeu_ps(S + j * G, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (sinks) sum = _mm256_add_ps(sum, exp_le0(_mm256_sub_ps(_mm256_loadu_ps(sinks), mx)));
  _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
}

// ctx[h] = sum_j p[j, h] c_j, 16 rows at a time; per block, strips of 16
// columns, and per strip every group's two head halves in turn (the
// strip's rows stay hot in L1, the accumulators come and go from L2).
void context(const MlaItem& it) {
  const int64_t C = it.latent, groups = groups_of(it);
  for (int64_t h = 0; h < groups * G; ++h)
    for (int64_t c = 0; c < it.ld; c += 8) _mm256_store_ps(it.ctx + h * it.ld + c, _mm256_setzero_ps());
  for (int64_t j0 = 0; j0 < it.rows; j0 += kCtxRows) {
    const int64_t j1 = j0 + kCtxRows < it.rows ? j0 + kCtxRows : it.rows;
    for (int64_t c = 0; c < C; c += 16) {
      const bool full = c + 16 <= C;
      const __m256i m0 = lanes(C - c), m1 = lanes(C - c - 8);
      for (int64_t hh = 0; hh < 2 * groups; ++hh) {  // half-groups of 4 heads
        float* ctx = it.ctx + hh * 4 * it.ld + c;
        const float* S = it.scores + (hh / 2) * rows2(it) * G + (hh % 2) * 4;
        __m256 acc[8];
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
          acc[2 * h] = _mm256_load_ps(ctx + h * it.ld);
          acc[2 * h + 1] = _mm256_load_ps(ctx + h * it.ld + 8);
        }
        for (int64_t j = j0; j < j1; ++j) {
          const float* row = value_at(it, j) + c;
          if (hh == 0 && j + kCtxRows < it.rows)
            _mm_prefetch(reinterpret_cast<const char*>(value_at(it, j + kCtxRows) + c), _MM_HINT_T1);
          const __m256 l0 = full ? _mm256_loadu_ps(row) : _mm256_maskload_ps(row, m0);
          const __m256 l1 = full ? _mm256_loadu_ps(row + 8) : _mm256_maskload_ps(row + 8, m1);
          const float* p = S + j * G;
#pragma GCC unroll 4
          for (int h = 0; h < 4; ++h) {
            const __m256 ph = _mm256_broadcast_ss(p + h);
            acc[2 * h] = _mm256_fmadd_ps(ph, l0, acc[2 * h]);
            acc[2 * h + 1] = _mm256_fmadd_ps(ph, l1, acc[2 * h + 1]);
          }
        }
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
          _mm256_store_ps(ctx + h * it.ld, acc[2 * h]);
          _mm256_store_ps(ctx + h * it.ld + 8, acc[2 * h + 1]);
        }
      }
    }
  }
}

// q_abs[h] = sum_i q_nope[h, i] W_UK_h[i], 64 columns at a time (8
// accumulator chains); without kv_b, q_abs[h] = q[h]. Heads past it.heads
// (the last group's padding) get zeros.
void absorb_query(const MlaItem& it) {
  const MlaItem& g = it;
  const int64_t C = g.latent, N = g.nope, R = g.rope;
  for (int64_t h = 0; h < groups_of(it) * G; ++h) {
    float* qa = g.q_abs + h * g.ld;
    float* qr = g.q_rope + h * g.ldr;
    if (!g.kv_b && h < g.heads) {
      for (int64_t c = 0; c < C; c += 8)
        _mm256_maskstore_ps(qa + c, lanes(C - c), _mm256_maskload_ps(g.q + h * g.q_stride + c, lanes(C - c)));
      continue;
    }
    if (h >= g.heads) {
      for (int64_t c = 0; c < g.ld; c += 8) _mm256_store_ps(qa + c, _mm256_setzero_ps());
      for (int64_t c = 0; c < g.ldr; c += 8) _mm256_store_ps(qr + c, _mm256_setzero_ps());
      continue;
    }
    const float* qh = g.q + h * g.q_stride;
    for (int64_t c = 0; c < g.ldr; c += 8) _mm256_store_ps(qr + c, _mm256_maskload_ps(qh + N + c, lanes(R - c)));
    const float* wk = g.kv_b + h * (N + g.v) * C;
    for (int64_t c = 0; c < C; c += 64) {
      __m256 acc[8];
      __m256i m[8];
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps(), m[k] = lanes(C - c - 8 * k);
      if (c + 64 <= C) {
        for (int64_t i = 0; i < N; ++i) {
          const __m256 qi = _mm256_broadcast_ss(qh + i);
          const float* w = wk + i * C + c;
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(w + 8 * k), acc[k]);
        }
      } else {
        for (int64_t i = 0; i < N; ++i) {
          const __m256 qi = _mm256_broadcast_ss(qh + i);
          const float* w = wk + i * C + c;
          for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(qi, _mm256_maskload_ps(w + 8 * k, m[k]), acc[k]);
        }
      }
      for (int k = 0; k < 8; ++k) _mm256_maskstore_ps(qa + c + 8 * k, m[k], acc[k]);
    }
  }
}

// o[h, i] = (W_UV_h[i] . ctx_h) / sum_h, 8 rows of W_UV per reduction; rows
// past v repeat the last one and are not stored.
void project_out(const MlaItem& g) {
  const int64_t C = g.latent, N = g.nope, V = g.v;
  const float* inv = g.inv_sum;
  for (int64_t h = 0; h < g.heads; ++h) {
    if (!g.kv_b) {  // o[h] = ctx_h / sum_h
      for (int64_t i = 0; i < C; i += 8)
        _mm256_maskstore_ps(g.o + h * V + i, lanes(C - i),
                            _mm256_mul_ps(_mm256_load_ps(g.ctx + h * g.ld + i), _mm256_set1_ps(inv[h])));
      continue;
    }
    const float* wv = g.kv_b + h * (N + V) * C + N * C;
    const float* ctx = g.ctx + h * g.ld;
    for (int64_t i = 0; i < V; i += 8) {
      const float* row[8];
      for (int r = 0; r < 8; ++r) row[r] = wv + (i + r < V ? i + r : V - 1) * C;
      __m256 acc[8];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 8 <= C; k += 8) {
        const __m256 cv = _mm256_load_ps(ctx + k);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(cv, _mm256_loadu_ps(row[r] + k), acc[r]);
      }
      if (k < C) {
        const __m256i m = lanes(C - k);
        const __m256 cv = _mm256_load_ps(ctx + k);  // zero past C
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(cv, _mm256_maskload_ps(row[r] + k, m), acc[r]);
      }
      _mm256_maskstore_ps(g.o + h * V + i, lanes(V - i), _mm256_mul_ps(sum8(acc), _mm256_set1_ps(inv[h])));
    }
  }
}

// The 4 lanes of v summed in a fixed tree.
inline float sum4(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

}  // namespace

void indexer_scores_avx2(const IndexerScores& x) {
  const int64_t H = x.heads, d = x.dim, quads = (H + 3) / 4, ld = (d + 15) / 16 * 16;
  // q padded to whole quads of heads with zeros (the tile reads 4 heads).
  for (int64_t h = 0; h < quads * 4; ++h)
    for (int64_t c = 0; c < ld; c += 8)
      _mm256_store_ps(x.scratch + h * ld + c, h < H ? _mm256_maskload_ps(x.q + h * d + c, lanes(d - c))
                                                     : _mm256_setzero_ps());
  const float* last = x.keys + (x.s1 - 1) * d;
  auto key = [&](int64_t s) { return s < x.s1 ? x.keys + s * d : last; };
  for (int64_t s = x.s0; s < x.s1; s += 2) {
    __m256 total = _mm256_setzero_ps();  // lanes 0-3: entry s's head positions, 4-7: entry s + 1's
    for (int64_t qd = 0; qd < quads; ++qd) {
      __m256 acc[8];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      // Prefetches on the first quad's pass only: the others find the rows in L1.
      dots_4x2(acc, x.scratch + qd * 4 * ld, ld, key(s), key(s + 1), d,
               {qd == 0 ? key(s + 2) : nullptr, key(s + 3)}, {nullptr, nullptr});
      alignas(32) float w8[8];
      for (int h = 0; h < 4; ++h) w8[h] = w8[4 + h] = qd * 4 + h < H ? x.w[qd * 4 + h] : 0.0f;
      total = _mm256_fmadd_ps(_mm256_max_ps(sum8(acc), _mm256_setzero_ps()), _mm256_load_ps(w8), total);
    }
    x.score[s] = sum4(_mm256_castps256_ps128(total));
    if (s + 1 < x.s1) x.score[s + 1] = sum4(_mm256_extractf128_ps(total, 1));
  }
}

void mla_item_avx2(const MlaItem& it) {
  absorb_query(it);
  scores(it);
  for (int64_t grp = 0; grp < groups_of(it); ++grp) {
    // The group's sinks, padding heads' at -inf (they only meet zero scores).
    float sinks[G];
    for (int h = 0; h < G; ++h)
      sinks[h] = it.sinks && grp * G + h < it.heads ? it.sinks[grp * G + h] : -__builtin_inff();
    softmax(it.rows, it.scores + grp * rows2(it) * G, it.inv_sum + grp * G, it.sinks ? sinks : nullptr);
  }
  context(it);
  project_out(it);
}

}  // namespace nibble::x86
