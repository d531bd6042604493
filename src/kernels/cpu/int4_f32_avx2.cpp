// INT4 weights (compressed-tensors pack-quantized, format/int4.h) against f32
// activations on AVX2: the default and only INT4 path. The scheme is the
// exact FP4 one of fp4_f32_avx2.cpp with another code table and BF16 scales;
// read that file first.
//
// Exactness. A weight is (code - 8) * s with s a BF16 scale: 4 and 8
// significant bits, so q * s is exact in f32, and so is each q * x inside an
// FMA. Per 64-column step the kernel sums the products of the 4-bit integers
// q (decoded exactly to f32) with x and then multiplies the sum by s once
// (as the FP4 kernels apply block scales), which is the reference's sum of
// (q s) x up to the f32 rounding of the partial sums: only accumulation
// rounds, as for every default kernel.
//
// Decoding. Every q in [-8, 7] is a bf16 (as f32: that word << 16), so two
// vpshufb tables give the low and high bytes of the bf16 words of 32 codes at
// once, exactly as fp4_f32_avx2.cpp decodes E2M1 (19 ops per 64 weights).
// Vector lanes 0-3 of the 8 decoded vectors come from the step's first 32
// codes and lanes 4-7 from the last 32 (the unpacks work within 128-bit
// lanes), so with 32-column groups one scale vector per step holds every
// lane's scale: [s(block 2i) x4, s(block 2i+1) x4] for step i.
//
// Summation order, per (row, token), the same for every batch size 1..4 and
// every row block (batch invariance, as fp4_f32_avx2.cpp): per 64-column step,
// tmp0 = q0 x0, tmp0 = fma(q1, x1, tmp0), fma(q2, x2), fma(q3, x3) (vectors
// 0-3), acc0 = fma(tmp0, s, acc0); vectors 4-7 likewise into tmp1 and acc1;
// at the end of the row hsum(acc0 + acc1). The last step of a row with cols
// % 64 == 32 decodes a zero-padded copy of its 16 bytes: the missing codes
// read as q = -8 and meet zero activations (exactly 0).
//
// Activations (ActsClass::f32_int4): per 64 columns, the 8 vectors of 8 f32
// in decode order (vector v, lane i holds column kBase[v] + 4 (i % 4) + 32
// (i / 4)), zero past cols, padded to 128 columns.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx2.h here (see
// kernels_x86.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx2.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kCols = 64;  // columns per step: 32 bytes of codes

inline int64_t lane_column(int v, int i) {
  constexpr int kBase[8] = {0, 2, 1, 3, 16, 18, 17, 19};
  return kBase[v] + 4 * (i % 4) + 32 * (i / 4);
}

// The scale vector of step g from the two BF16 scales of its 32-column
// blocks, lo (block 2g) and hi (block 2g+1) in one dword: each scale's bits
// into the high half of the dwords of its 128-bit lane.
inline __m256 step_scales(uint32_t two) {
  const __m256i pick = _mm256_setr_epi32(0x01008080, 0x01008080, 0x01008080, 0x01008080, 0x03028080, 0x03028080,
                                         0x03028080, 0x03028080);
  return _mm256_castsi256_ps(_mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(two)), pick));
}

// The two block scales of step g (32-column blocks 2g, 2g+1; `blocks` of
// them exist in the step, 1 in a 32-column tail) of a row's BF16 scales,
// for `group` columns per scale (kG32: group == 32, read as one dword).
template <bool kG32>
inline uint32_t scale_pair(const uint16_t* srow, int64_t g, int64_t group, int blocks) {
  if constexpr (kG32) {
    if (blocks == 2) {
      uint32_t v;
      __builtin_memcpy(&v, srow + 2 * g, 4);
      return v;
    }
    return srow[2 * g];
  } else {
    const uint32_t lo = srow[(kCols * g) / group];
    const uint32_t hi = blocks == 2 ? srow[(kCols * g + 32) / group] : 0u;
    return lo | (hi << 16);
  }
}

// One 64-column step of one row against T tokens: v the 32 code bytes, s the
// scale vector, x[t] the step's activations.
template <int T>
inline void step(__m256i v, __m256 s, const float* const* x, __m256 (*acc)[T]) {
  // bf16 of q = code - 8: low and high bytes (tables per 128-bit lane).
  const __m256i tlo = _mm256_setr_epi8(0, -32, -64, -96, -128, 64, 0, -128, 0, -128, 0, 64, -128, -96, -64, -32, 0,
                                       -32, -64, -96, -128, 64, 0, -128, 0, -128, 0, 64, -128, -96, -64, -32);
  const __m256i thi = _mm256_setr_epi8(-63, -64, -64, -64, -64, -64, -64, -65, 0, 63, 64, 64, 64, 64, 64, 64, -63,
                                       -64, -64, -64, -64, -64, -64, -65, 0, 63, 64, 64, 64, 64, 64, 64);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i hmask = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  const __m256i L = _mm256_and_si256(v, m4), H = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  const __m256i lL = _mm256_shuffle_epi8(tlo, L), hL = _mm256_shuffle_epi8(thi, L);
  const __m256i lH = _mm256_shuffle_epi8(tlo, H), hH = _mm256_shuffle_epi8(thi, H);
  const __m256i words[4] = {_mm256_unpacklo_epi8(lL, hL), _mm256_unpacklo_epi8(lH, hH),
                            _mm256_unpackhi_epi8(lL, hL), _mm256_unpackhi_epi8(lH, hH)};
  auto half_products = [&](int q, __m256* tmp) {
    const __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(words[q], 16));
    const __m256 o = _mm256_castsi256_ps(_mm256_and_si256(words[q], hmask));
    for (int t = 0; t < T; ++t) {
      const __m256 xe = _mm256_load_ps(x[t] + 16 * q), xo = _mm256_load_ps(x[t] + 16 * q + 8);
      tmp[t] = _mm256_fmadd_ps(o, xo, q % 2 == 0 ? _mm256_mul_ps(e, xe) : _mm256_fmadd_ps(e, xe, tmp[t]));
    }
  };
  if constexpr (T <= 2) {
    __m256 tmp[2][T];
    for (int q = 0; q < 4; ++q) half_products(q, tmp[q / 2]);
    for (int t = 0; t < T; ++t) {
      acc[0][t] = _mm256_fmadd_ps(tmp[0][t], s, acc[0][t]);
      acc[1][t] = _mm256_fmadd_ps(tmp[1][t], s, acc[1][t]);
    }
  } else {
    // One half at a time keeps 2T accumulators + T temporaries live (the
    // same operations per pair; see fp4_f32_avx2.cpp).
    for (int half = 0; half < 2; ++half) {
      __m256 tmp[T];
      half_products(2 * half, tmp);
      half_products(2 * half + 1, tmp);
      for (int t = 0; t < T; ++t) acc[half][t] = _mm256_fmadd_ps(tmp[t], s, acc[half][t]);
    }
  }
}

// Steps [g0, g1) of one row, continuing the accumulators in `state` (acc[0][t]
// at 16 t, acc[1][t] at 16 t + 8), loaded at the start and stored at the end
// (exact: column chunking changes no result). g1 = the row's step count
// includes a 32-column last step. Prefetches one line per two steps at pf +
// 32 g and, where spf is set, the scales of step g at spf every 16 steps
// (one line of group-32 scales): a block's rows read their scales in
// pieces 1 KB or more apart, which the hardware prefetcher does not follow.
template <int T, bool kG32>
void int4_row_part(const uint8_t* wrow, const uint16_t* srow, int64_t cols, int64_t group, int64_t g0, int64_t g1,
                   const float* const* acts, const uint8_t* pf, const uint16_t* spf, float* state) {
  __m256 acc[2][T];
  for (int t = 0; t < T; ++t) {
    acc[0][t] = _mm256_load_ps(state + 16 * t);
    acc[1][t] = _mm256_load_ps(state + 16 * t + 8);
  }
  const float* x[T];
  const int64_t full = cols / kCols, rem = cols % kCols;
  const int64_t g_end = g1 < full ? g1 : full;
  for (int64_t g = g0; g < g_end; ++g) {
    if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * g), _MM_HINT_T0);
    if (spf != nullptr && (g & 15) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(spf + kCols * g / group), _MM_HINT_T0);
    const __m256 s = step_scales(scale_pair<kG32>(srow, g, group, 2));
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * g;
    step<T>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + 32 * g)), s, x, acc);
  }
  if (rem > 0 && g1 > full) {  // 32 columns, through a zero-padded copy
    alignas(32) uint8_t buf[64];
    copy_tail(wrow + 32 * full, rem / 2, buf);
    const __m256 s = step_scales(scale_pair<kG32>(srow, full, group, 1));
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * full;
    step<T>(_mm256_load_si256(reinterpret_cast<const __m256i*>(buf)), s, x, acc);
  }
  for (int t = 0; t < T; ++t) {
    _mm256_store_ps(state + 16 * t, acc[0][t]);
    _mm256_store_ps(state + 16 * t + 8, acc[1][t]);
  }
}

// Rows and column chunks as fp4_f32_avx2.cpp's fp4_range: one token runs
// whole rows; more run blocks of 8 rows over 1024-column chunks so that the
// chunk's x stays in L1.
constexpr int64_t kChunkCols = 1024;
constexpr int64_t kBlockRows = 8;

template <int T, bool kG32>
void int4_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                const RowsOut& out) {
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(acts[t]);
  const int64_t cols = w.cols, wbytes = cols / 2, sper = cols / w.group;
  const int64_t steps = (cols + kCols - 1) / kCols;
  const int64_t chunk = T == 1 ? steps : kChunkCols / kCols;
  const int64_t block = T == 1 ? 1 : kBlockRows;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w.scales);
  alignas(32) float state[kBlockRows * 16 * T];
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t nr = r1 - rb < block ? r1 - rb : block;
    for (int64_t i = 0; i < nr * 16 * T; ++i) state[i] = 0.0f;
    for (int64_t g0 = 0; g0 < steps; g0 += chunk) {
      const int64_t g1 = g0 + chunk < steps ? g0 + chunk : steps;
      for (int64_t i = 0; i < nr; ++i) {
        const uint8_t* wrow = w.data + (rb + i) * wbytes;
        const uint8_t* pf = T == 1 ? wrow + 2 * kPrefetch : wrow + block * wbytes;
        const uint16_t* srow = scales + (rb + i) * sper;
        const uint16_t* spf = T == 1 ? nullptr : srow + block * sper;
        int4_row_part<T, kG32>(wrow, srow, cols, w.group, g0, g1, x, pf, spf, state + i * 16 * T);
      }
    }
    for (int64_t i = 0; i < nr; ++i) {
      float dots[T];
      for (int t = 0; t < T; ++t) {
        const float* st = state + i * 16 * T + 16 * t;
        dots[t] = hsum(_mm256_add_ps(_mm256_load_ps(st), _mm256_load_ps(st + 8)));
      }
      store_row<T>(out, rb + i, t0, dots, 1.0f);
    }
  }
}

template <int T>
void int4_range_at(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                   const RowsOut& out) {
  if (w.group == 32) int4_range<T, true>(w, r0, r1, acts, t0, out);
  else int4_range<T, false>(w, r0, r1, acts, t0, out);
}

}  // namespace

void int4_f32_prepare_avx2(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kPad);
  for (int64_t g = 0; g < padded; g += kCols)
    for (int v = 0; v < 8; ++v)
      for (int i = 0; i < 8; ++i) {
        const int64_t c = g + lane_column(v, i);
        out[g + 8 * v + i] = c < cols ? x[c] : 0.0f;
      }
}

void int4_f32_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                        int64_t t0, const RowsOut& out) {
  switch (n_tok) {
    case 1: int4_range_at<1>(w, r0, r1, acts, t0, out); break;
    case 2: int4_range_at<2>(w, r0, r1, acts, t0, out); break;
    case 3: int4_range_at<3>(w, r0, r1, acts, t0, out); break;
    default: int4_range_at<4>(w, r0, r1, acts, t0, out); break;
  }
}

}  // namespace nibble::x86
