// The absorbed MLA attention of one token for an item of heads, AVX-512
// (kernels_x86.h: MlaItem; the math is in model/deepseek_v3_attention.h).
//
// Phases, each streaming its operand once per item:
//   q_abs    [8g, C]  = W_UK_h^T q_nope_h       reads W_UK (n x C per head)
//   scores   [g, T, 8] = (q_abs . c_j + q_rope . kr_j) * scale
//                                                cache rows in blocks of 64
//                                                (147 KiB at C = 512, in L2);
//                                                every group of 8 heads passes
//                                                over a block before the next
//   softmax  in place over j, per head
//   ctx      [8g, C]  = sum_j p_j c_j            blocks of 16 rows, strips of 32
//                                                columns, every group over
//                                                each strip while it is in L1
//   o        [8g, v]  = W_UV_h ctx_h / sum_h     reads W_UV
// so a token's item reads the cache from memory twice, and each cache row
// loaded into registers serves 8 heads.
//
// Register tiles. Scores: 8 heads x 2 rows = 16 zmm accumulators over C
// (then r), 10 loads (q_abs from L1, rows from L1/L2) per 16 FMAs, and one
// 16-to-1 transposing reduction whose 16 lanes are exactly the 16 scores,
// position-major (row j heads 0..7, row j+1 heads 0..7), stored with one
// instruction. Ctx: 8 heads x 32 columns = 16 accumulators, 2 row loads and
// 8 broadcasts per 16 FMAs.
//
// Summation order (fixed, per head, independent of the other heads of its
// group and item, of the batch and of the thread count): dots run lane-wise
// over C in chunk order, then over r, then the fixed tree of sum16; the
// softmax sum takes even positions in one lane and odd ones in another, in
// position order; ctx runs over positions in order, lane by lane.
//
// GCC 12's shuffle and extract intrinsics build on _mm512_undefined_ps(),
// whose self-initialisation trips -Wuninitialized (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"

namespace nibble::x86 {
namespace {

constexpr int G = int(kMlaGroup);
static_assert(G == 8, "the score tile maps 8 heads x 2 rows onto 16 lanes");
// Cache rows per score block (even): 64 rows of C + r = 576 floats (147 KiB)
// stay in L2 while the item's groups pass over them.
constexpr int64_t kScoreRows = 64;
// Cache rows per ctx block: a group's accumulators are loaded and stored
// once per block and strip, i.e. once per 16 rows x 16 FMAs; the block's
// 16 x 32-column strip (2 KiB) stays in L1 while every group passes over it.
constexpr int64_t kCtxRows = 16;

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

// This file keeps q_abs [8g, ld] and q_rope [8g, ldr] chunk-interleaved per
// group: group b's block of 8 ld floats holds chunk 0 (16 floats) of heads
// 0..7, then chunk 1 of heads 0..7, ..., so the score tile finds its 8
// query vectors at fixed offsets from one pointer. Head h's chunk kc:
inline float* q_slot(float* base, int64_t ld, int64_t h, int64_t kc) {
  return base + (h / G) * G * ld + kc * (G * 16) + (h % G) * 16;
}

inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? 0 : __mmask16((1u << n) - 1); }

// Lane i = the sum of v[i]'s 16 lanes: a transposing tree of 30 shuffles
// and 15 adds instead of 16 separate reductions (~8 ops each). Traced
// through the four levels below, output lane 4b + k receives the total of
// its input u[4k + b]; feeding u[4k + b] = v[4b + k] puts v[i] in lane i.
// Each total is its own vector's lanes added in a fixed tree.
inline __m512 sum16(const __m512 (&v)[16]) {
  __m512 u[16];
  for (int j = 0; j < 16; ++j) u[j] = v[4 * (j % 4) + j / 4];
  __m512 w[8], x[4], s[2];
  for (int k = 0; k < 8; ++k)  // 512 -> 256 bits: blocks (0+2, 1+3) of u[2k], then of u[2k+1]
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xEE));
  for (int m = 0; m < 4; ++m)  // 256 -> 128: block b of x[m] holds u[4m + b]
    x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0xDD));
  for (int n = 0; n < 2; ++n)  // 128 -> 64 within blocks
    s[n] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * n], x[2 * n + 1], 0x88),
                         _mm512_shuffle_ps(x[2 * n], x[2 * n + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], 0x88), _mm512_shuffle_ps(s[0], s[1], 0xDD));
}

// acc[r * 8 + h] += q_h . row_r over n floats: a group's 8 query vectors
// (chunk-interleaved, see q_slot) against 2 rows (row0, row1). The rows are
// loaded once per chunk and shared by the 8 heads; each query chunk is loaded
// once into a register and used for both rows (the empty asm keeps GCC from
// folding it into both FMAs as a memory operand, which loads it twice).
// pf: the next row pair (n floats each), prefetched into L1 in step with
// the loads (the hardware prefetchers left the tile waiting on L2: the row
// loads were the hot spot); pf2, unless its first is null, a pair of the
// next block, prefetched into L2 (the first group's pass over a block
// otherwise waits on L3). Rows by pointer: gathered rows are not adjacent.
__attribute__((always_inline)) inline void dots_8x2(__m512 (&acc)[16], const float* q, const float* row0,
                                                    const float* row1, int64_t n, const float* const (&pf)[2],
                                                    const float* const (&pf2)[2]) {
  // Full chunks unmasked (no mask to rebuild per chunk), then one masked tail.
  auto chunk = [&](int64_t k, __mmask16 m) __attribute__((always_inline)) {
    _mm_prefetch(reinterpret_cast<const char*>(pf[0] + k), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pf[1] + k), _MM_HINT_T0);
    if (pf2[0]) {
      _mm_prefetch(reinterpret_cast<const char*>(pf2[0] + k), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(pf2[1] + k), _MM_HINT_T1);
    }
    const __m512 r0 = _mm512_maskz_loadu_ps(m, row0 + k), r1 = _mm512_maskz_loadu_ps(m, row1 + k);
    const float* qk = q + k * G;  // chunk k / 16 of the 8 heads, 16 floats each
#pragma GCC unroll 8
    for (int h = 0; h < G; ++h) {
      __m512 qv = _mm512_maskz_loadu_ps(m, qk + h * 16);
      __asm__("" : "+v"(qv));
      acc[h] = _mm512_fmadd_ps(qv, r0, acc[h]);
      acc[G + h] = _mm512_fmadd_ps(qv, r1, acc[G + h]);
    }
  };
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) chunk(k, 0xFFFF);
  if (k < n) chunk(k, lanes(n - k));
}

// scores[grp][j * 8 + h] for all rows; an odd last row is paired with
// itself and its twin's 8 lanes land in the buffer's padding row.
void scores(const MlaItem& it) {
  const int64_t C = it.latent, R = it.rope, groups = groups_of(it);
  const __m512 scale = _mm512_set1_ps(it.scale);
  for (int64_t b0 = 0; b0 < it.rows; b0 += kScoreRows) {
    const int64_t b1 = b0 + kScoreRows < it.rows ? b0 + kScoreRows : it.rows;
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* qa = it.q_abs + grp * G * it.ld;
      const float* qr = it.q_rope + grp * G * it.ldr;
      float* S = it.scores + grp * rows2(it) * G;
      for (int64_t j = b0; j < b1; j += 2) {
        const int64_t j1 = j + 1 < it.rows ? j + 1 : j;
        // Prefetch targets clamped to the last row (row_ptrs ends there).
        auto row = [&](int64_t i) { return i < it.rows ? i : it.rows - 1; };
        const int64_t n0 = row(j + 2), n1 = row(j + 3), f0 = row(j + kScoreRows), f1 = row(j + kScoreRows + 1);
        __m512 acc[16];
        for (__m512& a : acc) a = _mm512_setzero_ps();
        const bool first = grp == 0;
        dots_8x2(acc, qa, row_at(it, j), row_at(it, j1), C, {row_at(it, n0), row_at(it, n1)},
                 {first ? row_at(it, f0) : nullptr, row_at(it, f1)});
        if (R > 0)
          dots_8x2(acc, qr, rope_at(it, j), rope_at(it, j1), R, {rope_at(it, n0), rope_at(it, n1)},
                   {first ? rope_at(it, f0) : nullptr, rope_at(it, f1)});
        _mm512_storeu_ps(S + j * G, _mm512_mul_ps(sum16(acc), scale));
      }
    }
  }
}

// exp(x) for x <= 0 (scores minus their maximum), within ~2 ulp: x = n ln2
// + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact to f32), e^r
// by its degree-7 Taylor polynomial (truncation r^8 / 8! < 5.3e-9, below
// 2^-24), times 2^n by scalef. Below -87.3 the result is clamped at ~1e-38
// instead of 0: a weight 38 orders of magnitude under the largest (which
// is 1) changes nothing.
inline __m512 exp_le0(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// One group's scores S [rows2, 8] -> exp(score - max) in place, and 1 / sum
// per head into inv[0..8). A vector holds two positions (heads 0..7 of j, of
// j + 1). sinks, unless null: the 8 heads' sink logits, which join the max
// and add exp(sink - max) to the sum last.
void softmax(int64_t rows, float* S, float* inv, const float* sinks) {
  const int64_t pairs = rows / 2;
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < pairs; ++i) mx = _mm512_max_ps(mx, _mm512_loadu_ps(S + i * 16));
  __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(mx), _mm512_extractf32x8_ps(mx, 1));
  const bool odd = rows % 2 != 0;
  if (odd) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(S + pairs * 16));
  if (sinks) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(sinks));
  const __m512 m16 = _mm512_insertf32x8(_mm512_castps256_ps512(m8), m8, 1);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < pairs; ++i) {
    const __m512 e = exp_le0(_mm512_sub_ps(_mm512_loadu_ps(S + i * 16), m16));
    _mm512_storeu_ps(S + i * 16, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (odd) {  // the last position, in the low 8 lanes
    const __m512 e = exp_le0(_mm512_sub_ps(_mm512_maskz_loadu_ps(0xFF, S + pairs * 16), m16));
    _mm512_mask_storeu_ps(S + pairs * 16, 0xFF, e);
    sum = _mm512_mask_add_ps(sum, 0xFF, sum, e);
  }
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1));
  if (sinks)
    s8 = _mm256_add_ps(s8, _mm512_castps512_ps256(exp_le0(_mm512_sub_ps(
                               _mm512_castps256_ps512(_mm256_loadu_ps(sinks)), m16))));
  _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), s8));
}

// ctx[h] = sum_j p[j, h] c_j, 16 rows at a time; per block, strips of 32
// columns, and per strip every group with its 8 heads' accumulators in
// registers: the strip's 2 KiB of rows stay hot in L1 for all groups while
// the accumulators come and go from L2.
void context(const MlaItem& it) {
  const int64_t C = it.latent, groups = groups_of(it);
  for (int64_t h = 0; h < groups * G; ++h)
    for (int64_t c = 0; c < it.ld; c += 16) _mm512_store_ps(it.ctx + h * it.ld + c, _mm512_setzero_ps());
  for (int64_t j0 = 0; j0 < it.rows; j0 += kCtxRows) {
    const int64_t j1 = j0 + kCtxRows < it.rows ? j0 + kCtxRows : it.rows;
    for (int64_t c = 0; c < C; c += 32) {
      const __mmask16 m0 = lanes(C - c), m1 = lanes(C - c - 16);
      for (int64_t grp = 0; grp < groups; ++grp) {
        float* ctx = it.ctx + grp * G * it.ld + c;
        const float* S = it.scores + grp * rows2(it) * G;
        __m512 acc[2 * G];
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          acc[2 * h] = _mm512_load_ps(ctx + h * it.ld);
          acc[2 * h + 1] = _mm512_load_ps(ctx + h * it.ld + 16);
        }
        for (int64_t j = j0; j < j1; ++j) {
          const float* row = value_at(it, j) + c;
          if (grp == 0 && j + kCtxRows < it.rows) {  // the next block's strip into L2
            const float* next = value_at(it, j + kCtxRows) + c;
            _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(next + 16), _MM_HINT_T1);
          }
          const __m512 l0 = _mm512_maskz_loadu_ps(m0, row), l1 = _mm512_maskz_loadu_ps(m1, row + 16);
          const float* p = S + j * G;
#pragma GCC unroll 8
          for (int h = 0; h < G; ++h) {
            const __m512 ph = _mm512_set1_ps(p[h]);
            acc[2 * h] = _mm512_fmadd_ps(ph, l0, acc[2 * h]);
            acc[2 * h + 1] = _mm512_fmadd_ps(ph, l1, acc[2 * h + 1]);
          }
        }
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          _mm512_store_ps(ctx + h * it.ld, acc[2 * h]);
          _mm512_store_ps(ctx + h * it.ld + 16, acc[2 * h + 1]);
        }
      }
    }
  }
}

// q_abs[h] = sum_i q_nope[h, i] W_UK_h[i], 128 columns at a time (8
// independent accumulator chains); without kv_b, q_abs[h] = q[h]. Heads past
// it.heads (the last group's padding) get zeros.
void absorb_query(const MlaItem& it) {
  const MlaItem& g = it;
  const int64_t C = g.latent, N = g.nope, R = g.rope;
  for (int64_t h = 0; h < groups_of(it) * G; ++h) {
    if (!g.kv_b && h < g.heads) {
      for (int64_t kc = 0; kc * 16 < C; ++kc)
        _mm512_store_ps(q_slot(g.q_abs, g.ld, h, kc),
                        _mm512_maskz_loadu_ps(lanes(C - 16 * kc), g.q + h * g.q_stride + 16 * kc));
      continue;
    }
    if (h >= g.heads) {
      for (int64_t kc = 0; kc < g.ld / 16; ++kc) _mm512_store_ps(q_slot(g.q_abs, g.ld, h, kc), _mm512_setzero_ps());
      for (int64_t kc = 0; kc < g.ldr / 16; ++kc)
        _mm512_store_ps(q_slot(g.q_rope, g.ldr, h, kc), _mm512_setzero_ps());
      continue;
    }
    const float* qh = g.q + h * g.q_stride;
    for (int64_t kc = 0; kc < g.ldr / 16; ++kc)
      _mm512_store_ps(q_slot(g.q_rope, g.ldr, h, kc), _mm512_maskz_loadu_ps(lanes(R - 16 * kc), qh + N + 16 * kc));
    const float* wk = g.kv_b + h * (N + g.v) * C;
    for (int64_t c = 0; c < C; c += 128) {
      __m512 acc[8];
      __mmask16 m[8];
      for (int k = 0; k < 8; ++k) acc[k] = _mm512_setzero_ps(), m[k] = lanes(C - c - 16 * k);
      for (int64_t i = 0; i < N; ++i) {
        const __m512 qi = _mm512_set1_ps(qh[i]);
        const float* w = wk + i * C + c;
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) acc[k] = _mm512_fmadd_ps(qi, _mm512_maskz_loadu_ps(m[k], w + 16 * k), acc[k]);
      }
      for (int k = 0; k < 8; ++k)
        if (c + 16 * k < C) _mm512_mask_storeu_ps(q_slot(g.q_abs, g.ld, h, c / 16 + k), m[k], acc[k]);
    }
  }
}

// o[h, i] = (W_UV_h[i] . ctx_h) / sum_h, 16 rows of W_UV per reduction; rows
// past v repeat the last one and are not stored. Without kv_b, o[h] = ctx_h
// / sum_h.
void project_out(const MlaItem& g) {
  const int64_t C = g.latent, N = g.nope, V = g.v;
  const float* inv = g.inv_sum;
  for (int64_t h = 0; h < g.heads; ++h) {
    if (!g.kv_b) {
      for (int64_t i = 0; i < C; i += 16)
        _mm512_mask_storeu_ps(g.o + h * V + i, lanes(C - i),
                              _mm512_mul_ps(_mm512_load_ps(g.ctx + h * g.ld + i), _mm512_set1_ps(inv[h])));
      continue;
    }
    const float* wv = g.kv_b + h * (N + V) * C + N * C;
    const float* ctx = g.ctx + h * g.ld;
    for (int64_t i = 0; i < V; i += 16) {
      const float* row[16];
      for (int r = 0; r < 16; ++r) row[r] = wv + (i + r < V ? i + r : V - 1) * C;
      __m512 acc[16];
      for (__m512& a : acc) a = _mm512_setzero_ps();
      for (int64_t k = 0; k < C; k += 16) {
        const __mmask16 m = lanes(C - k);
        const __m512 cv = _mm512_load_ps(ctx + k);  // zero past C
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(cv, _mm512_maskz_loadu_ps(m, row[r] + k), acc[r]);
      }
      _mm512_mask_storeu_ps(g.o + h * V + i, lanes(V - i), _mm512_mul_ps(sum16(acc), _mm512_set1_ps(inv[h])));
    }
  }
}

// The 8 lanes of v (one tile half) summed in a fixed tree.
inline float sum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

}  // namespace

void indexer_scores_avx512(const IndexerScores& x) {
  const int64_t H = x.heads, d = x.dim, groups = (H + G - 1) / G, ld = (d + 15) / 16 * 16;
  // q chunk-interleaved per group of 8 heads (q_slot), zero past the heads.
  for (int64_t h = 0; h < groups * G; ++h)
    for (int64_t kc = 0; kc < ld / 16; ++kc)
      _mm512_store_ps(q_slot(x.scratch, ld, h, kc),
                      h < H ? _mm512_maskz_loadu_ps(lanes(d - 16 * kc), x.q + h * d + 16 * kc) : _mm512_setzero_ps());
  const float* last = x.keys + (x.s1 - 1) * d;
  auto key = [&](int64_t s) { return s < x.s1 ? x.keys + s * d : last; };
  const float* const none[2] = {nullptr, nullptr};
  for (int64_t s = x.s0; s < x.s1; s += 2) {
    __m512 total = _mm512_setzero_ps();  // lanes 0-7: entry s's head positions, 8-15: entry s + 1's
    for (int64_t grp = 0; grp < groups; ++grp) {
      __m512 acc[16];
      for (__m512& a : acc) a = _mm512_setzero_ps();
      dots_8x2(acc, x.scratch + grp * G * ld, key(s), key(s + 1), d, {key(s + 2), key(s + 3)}, none);
      alignas(64) float w16[16];
      for (int h = 0; h < G; ++h) w16[h] = w16[G + h] = grp * G + h < H ? x.w[grp * G + h] : 0.0f;
      total = _mm512_fmadd_ps(_mm512_max_ps(sum16(acc), _mm512_setzero_ps()), _mm512_load_ps(w16), total);
    }
    x.score[s] = sum8(_mm512_castps512_ps256(total));
    if (s + 1 < x.s1) x.score[s + 1] = sum8(_mm512_extractf32x8_ps(total, 1));
  }
}

void mla_item_avx512(const MlaItem& it) {
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
