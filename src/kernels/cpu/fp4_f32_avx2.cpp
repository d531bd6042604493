// FP4 (MXFP4 / NVFP4) weights against f32 activations on AVX2: the default
// FP4 path (the int8 one in linear_avx2.cpp is opt-in). As on AVX-512
// (fp4_f32_avx512.cpp, read that first), products are exact and only the
// f32 accumulation rounds.
//
// Decoding. AVX2's vpermps has 8 table entries, one short of E2M1's 16
// codes, and fixing the sign afterwards costs 3 more ops per vector. But
// every E2M1 value is a bf16 (a 16-bit word; as f32 it is that word << 16),
// and vpshufb looks up 16 entries per byte. Per 32 bytes of codes (64
// weights, 2 MXFP4 / 4 NVFP4 blocks), split into low nibbles L (byte j =
// code 2j) and high nibbles H (code 2j+1):
//   lo/hi bytes of the bf16 words  4 x vpshufb (tables tlo, thi)
//   words                          4 x vpunpck{l,h}bw(lo, hi)
//   f32                            per word vector W: W << 16 (even words),
//                                  W & 0xFFFF0000 (odd words)
// 19 ops for 8 vectors of 8 f32 (the vpermps route takes 40), then per token
// 8 FMAs. The unpacks work within 128-bit lanes, so vector lanes 0-3 come
// from the first 32 codes and lanes 4-7 from the last 32: with W0 the
// unpacklo and W1 the unpackhi words,
//   vector   0      1      2      3      4      5      6      7
//   from     L W0e  L W0o  H W0e  H W0o  L W1e  L W1o  H W1e  H W1o
//   code     4i     4i+2   4i+1   4i+3   16+4i  18+4i  17+4i  19+4i   (+32 for lanes i = 4..7, i mod 4 above)
// Vectors 0-3 cover columns 0-15 (lanes 0-3) and 32-47 (lanes 4-7), vectors
// 4-7 columns 16-31 and 48-63: one scale vector each per group, s0 = blocks
// (0, 2) and s1 = blocks (1, 3) for NVFP4, both (0, 1) for MXFP4.
//
// Activations (ActsClass::f32_fp4): per group of 64 columns, those 8 vectors
// of 8 f32 in that order, zero past cols; padded to 128 columns.
//
// Rows one at a time (16 registers); from 2 tokens on, in blocks of 8 rows
// over chunks of 1024 columns, so that x stays in L1 (see fp4_range); more
// than 8 tokens decode each weight once for all of them (fp4_range_many).
// Per group and token, the products of vectors 0-3 sum into a temporary
// (from the first, by a multiply), which one FMA with s0 adds into the
// pair's accumulator; then vectors 4-7 likewise, with s1, into the same
// accumulator; the row's result is hsum(acc). Between column chunks the
// accumulators wait in memory, exactly: the chunking changes no result.
// (Until 2026-12, each half had its own accumulator, hsum(acc0 + acc1): one
// accumulator frees T registers, which the many-token micro-kernel needs.)
// The scales join only there, after the products: MXFP4 tables scaled per
// block exponent (8 FMAs per group, no scale FMAs) gained 7-16% from cache
// but lost 10-15% at one token from DRAM, like every variant whose decode
// waited on the scale bytes:
// bench/results/1400_avx2_mxfp4_scaled_tables_dropped.txt.
//
// Batch invariance. A token's result must not depend on the batch it comes
// in, so that is the arithmetic of every (row, token) pair for every T
// (tokens per call) and weight source (decoded in registers or from the
// decoded buffer): T only decides how many tokens share a decoded group,
// nothing is summed across tokens. (Before, T > 2 multiplied the scales
// into the decoded weights instead, a different rounding.) For T > 2
// group_step finishes the first half of a group before the second; the
// order of each pair's operations is the same either way.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx2.h here (see
// kernels_x86.h).
// decoded_block's temporaries start with a multiply inside the loop, which
// GCC 12 cannot see (a false "may be used uninitialized").
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx2.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kCols = 64;  // columns per group: 32 bytes of codes

// Column of group-relative vector v (0..7) and lane i (0..7); see above.
inline int64_t lane_column(int v, int i) {
  constexpr int kBase[8] = {0, 2, 1, 3, 16, 18, 17, 19};
  return kBase[v] + 4 * (i % 4) + 32 * (i / 4);
}

// NVFP4 scales of 64 weights (4 E4M3 bytes) times 2^-8 (the f16 trick of
// linear_avx2.cpp): s0 = [n0 x4, n2 x4], s1 = [n1 x4, n3 x4].
inline void nv_scales(int32_t s4, __m256* s0, __m256* s1) {
  const __m128i w = _mm_cvtepi8_epi16(_mm_cvtsi32_si128(s4));
  const __m128i f = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(int16_t(0xBF80)));
  const __m256 q = _mm256_castps128_ps256(_mm_cvtph_ps(f));  // n0..n3 in lanes 0..3
  *s0 = _mm256_permutevar8x32_ps(q, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
  *s1 = _mm256_permutevar8x32_ps(q, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
}

// Scale vectors of one group from `bytes` scale bytes (fewer in a tail).
template <bool kNv>
inline void group_scales(const uint8_t* s, int64_t bytes, __m256* s0, __m256* s1) {
  int32_t v = 0;
  __builtin_memcpy(&v, s, size_t(bytes));
  if constexpr (kNv) {
    nv_scales(v, s0, s1);
  } else {
    *s0 = *s1 = mx_scales(_mm_cvtsi32_si128(v));
  }
}

// The words of one group's bf16 weights (4 vectors of 16): see the table
// above. Vector 2q of the group is words[q] << 16, vector 2q + 1 is
// words[q] & 0xFFFF0000.
inline void group_words(__m256i v, __m256i* words) {
  // bf16 of the E2M1 codes: low and high bytes.
  const __m256i tlo = _mm256_setr_epi8(0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64, 0, 0,
                                       -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64);
  const __m256i thi = _mm256_setr_epi8(0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, -128, -65, -65, -65, -64, -64,
                                       -64, -64, 0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, -128, -65, -65, -65,
                                       -64, -64, -64, -64);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i L = _mm256_and_si256(v, m4), H = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  const __m256i lL = _mm256_shuffle_epi8(tlo, L), hL = _mm256_shuffle_epi8(thi, L);
  const __m256i lH = _mm256_shuffle_epi8(tlo, H), hH = _mm256_shuffle_epi8(thi, H);
  words[0] = _mm256_unpacklo_epi8(lL, hL);
  words[1] = _mm256_unpacklo_epi8(lH, hH);
  words[2] = _mm256_unpackhi_epi8(lL, hL);
  words[3] = _mm256_unpackhi_epi8(lH, hH);
}

// A group's 8 weight vectors from its words: e(q) = vector 2q, o(q) =
// vector 2q + 1. (decode_part stores them, in that order, for the
// many-token path.)
struct WordsGroup {
  const __m256i* words;
  __m256 e(int q) const { return _mm256_castsi256_ps(_mm256_slli_epi32(words[q], 16)); }
  __m256 o(int q) const { return _mm256_castsi256_ps(_mm256_and_si256(words[q], _mm256_set1_epi32(int32_t(0xFFFF0000u)))); }
};
// A decoded group in memory: vectors e(0), o(0), .., e(3), o(3), then s0,
// s1 (kDecodedFloats floats, 32-byte aligned).
constexpr int64_t kDecodedFloats = 80;

// One group of one row against T tokens: w its weight vectors, s0 / s1 the
// scale vectors, x[t] the group's activations. The same operations per
// (row, token) pair for every T (batch invariance); decoded_block repeats
// them over decoded groups.
template <int T, class Weights>
inline void group_products(const Weights& w, __m256 s0, __m256 s1, const float* const* x, __m256* acc) {
  // Per token, the products of one half: tmp = e x_e (first of the pair) or
  // fma(e, x_e, tmp), then fma(o, x_o, tmp).
  auto half_products = [&](int q, __m256* tmp) {
    const __m256 e = w.e(q);
    const __m256 o = w.o(q);
    for (int t = 0; t < T; ++t) {
      const __m256 xe = _mm256_load_ps(x[t] + 16 * q), xo = _mm256_load_ps(x[t] + 16 * q + 8);
      tmp[t] = _mm256_fmadd_ps(o, xo, q % 2 == 0 ? _mm256_mul_ps(e, xe) : _mm256_fmadd_ps(e, xe, tmp[t]));
    }
  };
  if constexpr (T <= 2) {
    // Both halves' temporaries live (2T registers): more independent chains.
    __m256 tmp[2][T];
    for (int q = 0; q < 4; ++q) half_products(q, tmp[q / 2]);
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(tmp[0][t], s0, acc[t]);
      acc[t] = _mm256_fmadd_ps(tmp[1][t], s1, acc[t]);
    }
  } else {
    // One half at a time (T accumulators + T temporaries).
    for (int half = 0; half < 2; ++half) {
      __m256 tmp[T];
      half_products(2 * half, tmp);
      half_products(2 * half + 1, tmp);
      for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(tmp[t], half == 0 ? s0 : s1, acc[t]);
    }
  }
}

// One group of one row against T tokens, decoded from its 32 code bytes v.
template <int T>
inline void group_step(__m256i v, __m256 s0, __m256 s1, const float* const* x, __m256* acc) {
  __m256i words[4];
  group_words(v, words);
  group_products<T>(WordsGroup{words}, s0, s1, x, acc);
}

// Groups [g0, g1) of one row (NVFP4: scale x 2^-8, global scale not
// applied) continuing the token accumulators in `state` (T vectors of 8
// f32: acc[t] at 8 t), which are loaded at the
// start and stored at the end: exact, so a row's sums do not depend on
// where its columns were split. g1 = the row's group count includes a
// partial last group. Prefetches one line per two groups at pf + 32 g and,
// where spf is set, one scale line per 64 scale bytes at spf.
template <int T, bool kNv>
void fp4_row_part(const uint8_t* wrow, const uint8_t* srow, int64_t cols, int64_t g0, int64_t g1,
                  const float* const* acts, const uint8_t* pf, const uint8_t* spf, float* state) {
  constexpr int64_t kScaleBytes = kNv ? 4 : 2;  // per group
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_load_ps(state + 8 * t);
  const float* x[T];
  const int64_t full = cols / kCols, rem = cols % kCols;
  const int64_t g_end = g1 < full ? g1 : full;
  for (int64_t g = g0; g < g_end; ++g) {
    if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * g), _MM_HINT_T0);
    if (spf != nullptr && (kScaleBytes * g) % 64 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(spf + kScaleBytes * g), _MM_HINT_T0);
    __m256 s0, s1;
    group_scales<kNv>(srow + kScaleBytes * g, kScaleBytes, &s0, &s1);
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * g;
    group_step<T>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + 32 * g)), s0, s1, x, acc);
  }
  if (rem > 0 && g1 > full) {  // 16 (NVFP4), 32 or 48 columns, through a zero-padded copy
    alignas(32) uint8_t buf[64];
    copy_tail(wrow + 32 * full, rem / 2, buf);
    __m256 s0, s1;
    group_scales<kNv>(srow + kScaleBytes * full, rem / (kNv ? 16 : 32), &s0, &s1);
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * full;
    group_step<T>(_mm256_load_si256(reinterpret_cast<const __m256i*>(buf)), s0, s1, x, acc);
  }
  for (int t = 0; t < T; ++t) _mm256_store_ps(state + 8 * t, acc[t]);
}

// Column chunks. Rows run one at a time (16 registers), so each row reads
// all T tokens' x of its columns; once T x cols x 4 bytes pass L1's 32 KB
// that stream comes from L2 and holds the kernel there (Zen 4, T = 4:
// 43% of the FMA peak at 4096 columns, 62% at 1024). So rows go in blocks
// of kBlockRows, columns in chunks of kChunkCols: a chunk's x (16 KB at
// T = 4) stays in L1 while the block's rows pass over it.
constexpr int64_t kChunkCols = 1024;
constexpr int64_t kBlockRows = 8;

template <int T, bool kNv>
void fp4_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
               const RowsOut& out) {
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(acts[t]);
  const int64_t cols = w.cols, wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  const int64_t groups = (cols + kCols - 1) / kCols;
  const float scale = kNv ? 256.0f * w.global_scale : 1.0f;  // 2^-8 of nv_scales, s_g
  // One token's x fits L1: whole rows, prefetching 2 KB ahead (twice the
  // other kernels' distance, as on AVX-512, fp4_f32_avx512.cpp: one thread
  // streaming from DRAM reached 0.71 of the paired probe at one token
  // against 0.62 with 1 KB).
  const int64_t chunk = T == 1 ? groups : kChunkCols / kCols;
  const int64_t block = T == 1 ? 1 : kBlockRows;
  alignas(32) float state[kBlockRows * 8 * T];
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t nr = r1 - rb < block ? r1 - rb : block;
    for (int64_t i = 0; i < nr * 8 * T; ++i) state[i] = 0.0f;
    for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
      const int64_t g1 = g0 + chunk < groups ? g0 + chunk : groups;
      for (int64_t i = 0; i < nr; ++i) {
        const uint8_t* wrow = w.data + (rb + i) * wbytes;
        // Blocks: the same columns of this row in the next block, what
        // the stream wants next (prefetching past the matrix is harmless).
        const uint8_t* pf = T == 1 ? wrow + 2 * kPrefetch : wrow + block * wbytes;
        // Its scales likewise: the block's rows read them in pieces 1 KB or
        // more apart, which the hardware prefetcher does not follow (NVFP4
        // at 2 tokens took twice its 1-token time from DRAM). One token
        // streams whole rows, scales included.
        const uint8_t* srow = w.scales + (rb + i) * sbytes;
        const uint8_t* spf = T == 1 ? nullptr : srow + block * sbytes;
        fp4_row_part<T, kNv>(wrow, srow, cols, g0, g1, x, pf, spf, state + i * 8 * T);
      }
    }
    for (int64_t i = 0; i < nr; ++i) {
      float dots[T];
      for (int t = 0; t < T; ++t) dots[t] = hsum(_mm256_load_ps(state + i * 8 * T + 8 * t));
      store_row<T>(out, rb + i, t0, dots, scale);
    }
  }
}

// ---- More than 8 tokens: each weight decoded once per call ----------------
//
// fp4_range decodes every group again for each pass of up to 6 tokens, and
// at 4 tokens the 19 decode ops per group (shuffles and shifts, which share
// Zen 4's FMA pipes) take a third of the vector ops. Here a block of
// kManyRows rows is decoded chunk by chunk (kManyCols columns,
// kDecodedFloats per group, 20 KB: in L1 with the tokens' x of the chunk)
// into f32 weight and scale vectors, and every token of the call runs over
// the decoded chunk, 2 rows x 3 tokens at a time (decoded_block): the same
// operations per (row, token) pair as group_products, accumulators waiting
// in memory between chunks as in fp4_range (exact), so the results are
// bitwise those of 1..6 tokens.
constexpr int64_t kManyCols = 512;
constexpr int64_t kManyGroups = kManyCols / kCols;
constexpr int64_t kManyRows = 8;
// From how many tokens on: at 5..8 tokens the decoded chunk serves too few
// of them for its stores and loads (bench --resident 512 x 4096 MXFP4, load
// ~10, GFLOP/s passes of 4 / decoded once: 5 tokens 62 / 55, 8: 68 / 63,
// 9: 65 / 70, 12: 69 / 73, 32: 68 / 75).
constexpr int kManyMinTokens = 8;

// Groups [g0, g1) of one row decoded into dst (kDecodedFloats per group);
// g1 = the row's group count includes a partial last group. Prefetches one
// line per two groups at pf + 32 g and one scale line per 64 scale bytes at
// spf (as fp4_row_part).
template <bool kNv>
void decode_part(const uint8_t* wrow, const uint8_t* srow, int64_t cols, int64_t g0, int64_t g1,
                 const uint8_t* pf, const uint8_t* spf, float* dst) {
  constexpr int64_t kScaleBytes = kNv ? 4 : 2;  // per group
  const int64_t full = cols / kCols, rem = cols % kCols;
  const int64_t g_end = g1 < full ? g1 : full;
  auto put = [&](__m256i v, __m256 s0, __m256 s1, float* d) __attribute__((always_inline)) {
    __m256i words[4];
    group_words(v, words);
    const WordsGroup w{words};
    for (int q = 0; q < 4; ++q) {
      _mm256_store_ps(d + 16 * q, w.e(q));
      _mm256_store_ps(d + 16 * q + 8, w.o(q));
    }
    _mm256_store_ps(d + 64, s0);
    _mm256_store_ps(d + 72, s1);
  };
  for (int64_t g = g0; g < g_end; ++g) {
    if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * g), _MM_HINT_T0);
    if ((kScaleBytes * g) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(spf + kScaleBytes * g), _MM_HINT_T0);
    __m256 s0, s1;
    group_scales<kNv>(srow + kScaleBytes * g, kScaleBytes, &s0, &s1);
    put(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + 32 * g)), s0, s1, dst + kDecodedFloats * (g - g0));
  }
  if (rem > 0 && g1 > full) {  // as in fp4_row_part
    alignas(32) uint8_t buf[64];
    copy_tail(wrow + 32 * full, rem / 2, buf);
    __m256 s0, s1;
    group_scales<kNv>(srow + kScaleBytes * full, rem / (kNv ? 16 : 32), &s0, &s1);
    put(_mm256_load_si256(reinterpret_cast<const __m256i*>(buf)), s0, s1, dst + kDecodedFloats * (full - g0));
  }
}

// Rows [i, i + R) of a row block's decoded chunk (ng groups, row i at
// dec + i * kManyGroups * kDecodedFloats) against tokens x[0 .. T) (their
// activations at the chunk), continuing the accumulators st[r * T + t].
// group_products' arithmetic per (row, token) pair, with R rows sharing
// each x load: R = 2, T = 3 holds 6 accumulators, 6 temporaries, 2 weight
// vectors and one x vector (15 of 16 registers), and loads 5 vectors per 6
// FMAs (one row of 4 tokens: 5 per 4, which Zen 4's two loads per cycle
// could not feed at two FMAs per cycle). Each weight vector's products are
// taken for all pairs before the next vector's (e then o), which changes
// no pair's order.
template <int R, int T>
void decoded_block(const float* dec, int64_t ng, const float* const* x, float* const* st) {
  constexpr int64_t kRow = kManyGroups * kDecodedFloats;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_load_ps(st[r * T + t]);
  for (int64_t g = 0; g < ng; ++g) {
    const float* d = dec + kDecodedFloats * g;
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      __m256 tmp[R][T];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {  // vector k of the half: q = 2 half + k / 2, e (k even) or o
        const int q = 2 * half + k / 2, eo = k % 2;
          __m256 wv[R];
          for (int r = 0; r < R; ++r) wv[r] = _mm256_load_ps(d + r * kRow + 16 * q + 8 * eo);
          for (int t = 0; t < T; ++t) {
            __m256 xv = _mm256_load_ps(x[t] + kCols * g + 16 * q + 8 * eo);
            // One load for the R rows: GCC would fold it into each FMA.
            __asm__("" : "+x"(xv));
            for (int r = 0; r < R; ++r)
              tmp[r][t] = q % 2 == 0 && eo == 0 ? _mm256_mul_ps(wv[r], xv) : _mm256_fmadd_ps(wv[r], xv, tmp[r][t]);
          }
        }
      for (int r = 0; r < R; ++r) {
        const __m256 sv = _mm256_load_ps(d + r * kRow + 64 + 8 * half);
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(tmp[r][t], sv, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) _mm256_store_ps(st[r * T + t], acc[r][t]);
}

// Tokens [t, t + T) against every row of a row block's decoded chunk:
// state[(i * n + t) * 8] holds row i's accumulator for token t.
template <int T>
void decoded_tokens(const float* dec, int64_t nr, int64_t ng, const uint8_t* const* acts, int64_t g0, int64_t t,
                    int64_t n, float* state) {
  constexpr int64_t kRow = kManyGroups * kDecodedFloats;
  const float* x[T];
  for (int k = 0; k < T; ++k) x[k] = reinterpret_cast<const float*>(acts[t + k]) + kCols * g0;
  int64_t i = 0;
  for (; i + 2 <= nr; i += 2) {
    float* st[2 * T];
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < T; ++k) st[r * T + k] = state + ((i + r) * n + t + k) * 8;
    decoded_block<2, T>(dec + i * kRow, ng, x, st);
  }
  if (i < nr) {
    float* st[T];
    for (int k = 0; k < T; ++k) st[k] = state + (i * n + t + k) * 8;
    decoded_block<1, T>(dec + i * kRow, ng, x, st);
  }
}

template <bool kNv>
void fp4_range_many(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t n,
                    int64_t t0, const RowsOut& out) {
  const int64_t cols = w.cols, wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  const int64_t groups = (cols + kCols - 1) / kCols;
  const float scale = kNv ? 256.0f * w.global_scale : 1.0f;
  alignas(32) float dec[kManyRows * kManyGroups * kDecodedFloats];
  alignas(32) float state[kManyRows * kFp4MaxTokensAvx2 * 8];
  for (int64_t rb = r0; rb < r1; rb += kManyRows) {
    const int64_t nr = r1 - rb < kManyRows ? r1 - rb : kManyRows;
    for (int64_t i = 0; i < nr * n * 8; ++i) state[i] = 0.0f;
    for (int64_t g0 = 0; g0 < groups; g0 += kManyGroups) {
      const int64_t g1 = g0 + kManyGroups < groups ? g0 + kManyGroups : groups;
      for (int64_t i = 0; i < nr; ++i) {
        const uint8_t* wrow = w.data + (rb + i) * wbytes;
        const uint8_t* srow = w.scales + (rb + i) * sbytes;
        decode_part<kNv>(wrow, srow, cols, g0, g1, wrow + kManyRows * wbytes, srow + kManyRows * sbytes,
                         dec + i * kManyGroups * kDecodedFloats);
      }
      int64_t t = 0;
      for (; t + 3 <= n; t += 3) decoded_tokens<3>(dec, nr, g1 - g0, acts, g0, t, n, state);
      if (n - t == 2) decoded_tokens<2>(dec, nr, g1 - g0, acts, g0, t, n, state);
      if (n - t == 1) decoded_tokens<1>(dec, nr, g1 - g0, acts, g0, t, n, state);
    }
    // Each row's tokens in order (RowsOut: repeated y_index entries add up
    // in token order).
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t t = 0; t < n; ++t) {
        const float dot = hsum(_mm256_load_ps(state + (i * n + t) * 8));
        store_row<1>(out, rb + i, t0 + t, &dot, scale);
      }
  }
}

template <int T>
void fp4_range_at(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                  const RowsOut& out) {
  if (w.kind == WeightKind::nvfp4) fp4_range<T, true>(w, r0, r1, acts, t0, out);
  else fp4_range<T, false>(w, r0, r1, acts, t0, out);
}

}  // namespace

void fp4_f32_prepare_avx2(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kPad);
  for (int64_t g = 0; g < padded; g += kCols)
    for (int v = 0; v < 8; ++v)
      for (int i = 0; i < 8; ++i) {
        const int64_t c = g + lane_column(v, i);
        out[g + 8 * v + i] = c < cols ? x[c] : 0.0f;
      }
}

void fp4_f32_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                       int64_t t0, const RowsOut& out) {
  if (n_tok > kManyMinTokens) {
    if (w.kind == WeightKind::nvfp4) fp4_range_many<true>(w, r0, r1, acts, n_tok, t0, out);
    else fp4_range_many<false>(w, r0, r1, acts, n_tok, t0, out);
    return;
  }
  // Passes of up to 6 tokens, in token order (RowsOut). 5 and 6 tokens ran
  // as 3 + 2 and 3 + 3, decoding every group twice: one pass is +24% / +12%
  // (bench --resident 512 x 4096 MXFP4, Zen 3: 2.55 / 2.30 -> 3.16 / 2.57
  // GB/s, ~59 GFLOP/s like 4 tokens), though 5-6 tokens' accumulators and
  // temporaries no longer all fit the 16 registers. DeepSeek-V4-Flash's
  // prefill gives each expert ~6 tokens per 256-token step. 7 and 8 stay
  // 4 + 3 and 4 + 4 (a 1-token pass costs nearly a full one).
  run_passes_of_6(n_tok, [&](int64_t t, auto tokens) {
    fp4_range_at<decltype(tokens)::value>(w, r0, r1, acts + t, t0 + t, out);
  });
}

}  // namespace nibble::x86
