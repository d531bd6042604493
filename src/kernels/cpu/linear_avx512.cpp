// AVX-512 linear kernels (F, BW, VL, DQ, VBMI, VNNI): Y[n, rows] = X · W^T
// for MXFP4, NVFP4, FP8 block-128, BF16 and F32 weights read in their stored
// format. Decode streams each weight once per call, so the aim is to turn
// bytes into dot products faster than DRAM delivers them. This file holds
// the driver, the activation layouts, the FP8 / BF16 / F32 paths and the
// lossy int8 FP4 path (opt-in); the exact FP4 path, the default, is
// fp4_f32_avx512.cpp.
//
// Batch invariance: a token's results do not depend on what else is in the
// call. Every path computes the dot product of a (row, token) pair with the
// same operations in the same order whatever the number of tokens T per
// pass (1..4; 8 for exact FP4 and FP8), the rows per block R, the row range
// a thread was given and the token's place in the batch; T and R only
// decide which pairs run side by side, and nothing is summed across tokens
// or rows. FP8: see fp8_rows and fp8_range_many;
// exact FP4: fp4_f32_avx512.cpp; BF16: see bf16_rows; int8 FP4, F32: one
// row at a time, one accumulator chain per token; int8 activations are
// quantized per token. tests/kernels/batch_invariance_test.cpp checks it
// bitwise.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx512.h here, no
// STL, everything but the entry points in an anonymous namespace (see
// kernels_x86.h).
// GCC 12's _mm512_reduce_add_ps and friends build on _mm256_undefined_pd(),
// whose self-initialisation trips -Wuninitialized (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx512.h"

namespace nibble::x86 {

namespace {

// ============================================================================
// Activation layouts
// ============================================================================
//
// int8_blocks (MXFP4 / NVFP4 weights). 2 x E2M1 is an integer in [-12, 12],
// so FP4 x int8 dot products run on VNNI (vpdpbusd: u8 x s8 -> s32). The
// weights become u8 through a 16-entry table holding 2*e2m1 + 12; the +12
// offset is taken back by a per-token correction -12 * sum(q). Per group of
// 128 elements (4 blocks of 32) and token, 256 bytes:
//   [  0.. 63] q of the even elements: block b's 16 evens at 16b   (int8)
//   [ 64..127] q of the odd elements, same order                    (int8)
//   [128..191] corr[16]: dword 4b+j = -12 * sum q[b][8j .. 8j+7]   (int32)
//   [192..255] xs[16]:   dword 4b+j = scale of block b              (f32)
// A 64-byte load of packed weights holds 128 elements; its low nibbles are
// the even elements and its high nibbles the odd ones, and vpdpbusd sums
// groups of 4 bytes, so dword j of 128-bit lane b covers elements 8j..8j+7
// of block b for both halves: exactly the dwords above. One NVFP4 block (16
// elements) is dwords 0-1 or 2-3 of a lane.
//
// x is quantized per block of 32 with scale amax / 127 (round to nearest
// even), as ggml's Q8_0: the one lossy step of the FP4 path.
//
// f32_plain (FP8, F32 weights): x as f32, zero-padded to a multiple of 128.
// f32_even_odd (BF16 weights): per 32 elements, 16 evens then 16 odds, since
// a BF16 pair in a dword widens to f32 as (dword << 16, dword & 0xFFFF0000).
// f32_fp4 (FP4 weights, exact): see fp4_f32_avx512.cpp; same size as f32_plain.

constexpr int64_t kGroup = 128;  // elements per int8 group
constexpr int64_t kTokens = 4;   // tokens per pass over a row tile
constexpr int64_t kGroupBytes = 256;

// One token's int8 groups from x[cols] (cols a multiple of 16).
void quantize_int8_token(const float* x, int64_t cols, uint8_t* out) {
  const int64_t groups = round_up(cols, kGroup) / kGroup;
  const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i twelve = _mm512_set1_epi8(12);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* grp = out + g * kGroupBytes;
    float* xs = reinterpret_cast<float*>(grp + 192);
    for (int b = 0; b < 4; ++b) {
      const int64_t base = g * kGroup + 32 * b;
      if (base >= cols) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(grp + 16 * b), _mm_setzero_si128());
        _mm_storeu_si128(reinterpret_cast<__m128i*>(grp + 64 + 16 * b), _mm_setzero_si128());
        for (int j = 0; j < 4; ++j) xs[4 * b + j] = 0.0f;
        continue;
      }
      // A last partial block (NVFP4 allows cols % 32 == 16) reads zeros.
      const int64_t left = cols - base;
      const __mmask16 m0 = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      const __mmask16 m1 = left >= 32 ? __mmask16(0xFFFF) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
      __m512 x0 = _mm512_maskz_loadu_ps(m0, x + base), x1 = _mm512_maskz_loadu_ps(m1, x + base + 16);
      float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
      float d = amax / 127.0f;
      __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));
      __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
      __m512i ev = _mm512_permutex2var_epi32(q0, even_idx, q1);
      __m512i od = _mm512_permutex2var_epi32(q0, odd_idx, q1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(grp + 16 * b), _mm512_cvtepi32_epi8(ev));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(grp + 64 + 16 * b), _mm512_cvtepi32_epi8(od));
      for (int j = 0; j < 4; ++j) xs[4 * b + j] = d;
    }
    // corr = -12 * (sum of 4 evens + 4 odds) per dword, by the same vpdpbusd.
    __m512i lo = _mm512_loadu_si512(grp), hi = _mm512_loadu_si512(grp + 64);
    __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), twelve, lo);
    c = _mm512_dpbusd_epi32(c, twelve, hi);
    _mm512_storeu_si512(grp + 128, _mm512_sub_epi32(_mm512_setzero_si512(), c));
  }
}

void copy_plain_token(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kGroup);
  for (int64_t c = 0; c < padded; c += 16) {
    int64_t left = cols - c;
    __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
    _mm512_storeu_ps(out + c, _mm512_maskz_loadu_ps(m, x + c));
  }
}

void split_even_odd_token(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kGroup);
  const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t c = 0; c < padded; c += 32) {
    int64_t left = cols - c;
    __mmask16 m0 = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
    left -= 16;
    __mmask16 m1 = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
    __m512 a = _mm512_maskz_loadu_ps(m0, x + c), b = _mm512_maskz_loadu_ps(m1, x + c + 16);
    _mm512_storeu_ps(out + c, _mm512_permutex2var_ps(a, even_idx, b));
    _mm512_storeu_ps(out + c + 16, _mm512_permutex2var_ps(a, odd_idx, b));
  }
}

// ============================================================================
// FP4 (MXFP4 / NVFP4): one weight row against T tokens
// ============================================================================
//
// Per 64 bytes of weights: 2 table lookups (vpshufb) give u8 codes for the
// even and odd elements; per token, two vpdpbusd into an accumulator seeded
// with the token's correction, then one convert and one FMA with the
// per-dword scale (weight block scale x activation block scale).

// 2 * E2M1 + 12 for codes 0..15 (8..15 negative).
inline __m512i fp4_lut() {
  return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// Block scales: mx_scales / nv_scales (simd_avx512.h) give dword 4b+j the
// scale of MXFP4 block b, dword 2b+j that of NVFP4 block b: the dwords above.

template <int T, bool kNv>
inline void fp4_step(__m512i v, __m512 ws, const uint8_t* const* acts, int64_t g,
                     __m512* acc) {
  const __m512i lut = fp4_lut();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
  __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
  for (int t = 0; t < T; ++t) {
    const uint8_t* a = acts[t] + g * kGroupBytes;
    __m512i d = _mm512_load_si512(a + 128);
    d = _mm512_dpbusd_epi32(d, lo, _mm512_load_si512(a));
    d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512(a + 64));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws, _mm512_load_ps(reinterpret_cast<const float*>(a + 192))), acc[t]);
  }
}

// dots[t] = sum over the row of (2*e2m1 * block scale) * x_t (scale 1/2 and
// s_g applied by the caller).
template <int T, bool kNv>
void fp4_row(const uint8_t* wrow, const uint8_t* srow, int64_t cols, const uint8_t* const* acts,
             float* dots) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t full = cols / kGroup;
  for (int64_t g = 0; g < full; ++g) {
    // Software prefetch kPrefetch bytes ahead (rows are contiguous, so this
    // runs on into the next row): the hardware prefetcher alone leaves too
    // few lines in flight while the core is busy decoding.
    if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(wrow + 64 * g + kPrefetch), _MM_HINT_T0);
    __m512i v = _mm512_loadu_si512(wrow + 64 * g);
    __m512 ws;
    if constexpr (kNv) ws = nv_scales(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(srow + 8 * g)));
    else {
      int32_t s4;
      __builtin_memcpy(&s4, srow + 4 * g, 4);
      ws = mx_scales(s4);
    }
    fp4_step<T, kNv>(v, ws, acts, g, acc);
  }
  const int64_t rem = cols % kGroup;  // a multiple of 32 (MXFP4) or 16 (NVFP4)
  if (rem > 0) {
    // Masked loads never touch bytes past the row; the zero codes they give
    // meet zero activations (the padding), so the tail adds nothing extra.
    __m512i v = _mm512_maskz_loadu_epi8((__mmask64(1) << (rem / 2)) - 1, wrow + 64 * full);
    __m512 ws;
    if constexpr (kNv) ws = nv_scales(_mm_maskz_loadu_epi8(__mmask16((1u << (rem / 16)) - 1), srow + 8 * full));
    else {
      int32_t s4 = 0;
      __builtin_memcpy(&s4, srow + 4 * full, size_t(rem / 32));
      ws = mx_scales(s4);
    }
    fp4_step<T, kNv>(v, ws, acts, full, acc);
  }
  for (int t = 0; t < T; ++t) dots[t] = _mm512_reduce_add_ps(acc[t]);
}

// ============================================================================
// FP8 block-128: E4M3 -> f16 bits -> f32 (exact), FMA with f32 activations
// ============================================================================
//
// R rows at a time share every activation load: at 4 tokens the f32 x of a
// 4096-column row is 64 KB, past L1, and one row at a time would stream it
// from L2 once per row. R rows also give R*T independent FMA chains. The
// tile scale (one per 128 columns of a 128-row band, the same for the R
// rows) is applied once per tile to each (row, token) partial sum.
//
// (Tried and dropped: widening E4M3 to bf16 and vdpbf16ps against bf16 x.
// vdpbf16ps issues once per cycle with latency 7 here, so it costs what two
// FMAs cost, and x would be rounded. Also dropped, on Zen 4: E4M3 -> f32 by
// integer ops, (sign-extended code << 20) & 0x87F00000 times 2^112, to
// avoid vcvtph2ps (~0.57 per cycle for zmm): 8 ops per 32 weights instead
// of 6 lost 3% at one token and 10% at four, bench --resident 512 x 4096.)

inline float ue8m0_value(uint8_t e) {
  if (e == 0) return bits_to_float(0x00400000u);  // 2^-127, a subnormal
  if (e == 255) return bits_to_float(0x7FC00000u);
  return bits_to_float(uint32_t(e) << 23);
}

// 32 E4M3 codes -> two vectors of 16 f32 (each value times 2^-8). With the
// code sign-extended to 16 bits, (v << 7) has the sign at bit 15 and |code|
// at bits 13..7; clearing bit 14 (a second copy of the sign) leaves the f16.
inline void e4m3x32_to_f32(__m256i codes, __m512* lo, __m512* hi) {
  __m512i f = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(codes), 7),
                               _mm512_set1_epi16(int16_t(0xBF80)));
  *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(f));
  *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f, 1));
}

// 32 E4M3 codes of a row at p (n <= 32 of them exist) as two f32 vectors.
inline void fp8_chunk(const uint8_t* p, int64_t n, __m512* lo, __m512* hi) {
  __m256i codes;
  if (n >= 32) codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  else codes = _mm256_maskz_loadu_epi8(__mmask32((1ull << n) - 1), p);
  e4m3x32_to_f32(codes, lo, hi);
}

// dots[r * T + t] = sum over cols of W[r] * scale * x_t, for R rows of
// stride ldw starting at w0, all in one 128-row band. Batch invariance (see
// fp4_f32_avx512.cpp): every (row, token) pair runs the same operations for
// every R and T: per 128-column tile, tmp = 0, then two FMAs per 32 columns
// in column order, then acc = fma(tmp, tile scale, acc); one horizontal sum
// at the end. (Before, R * T > 8 multiplied the scale into the weights
// instead.) At R * T > 8 the R*T temporaries and accumulators do not all
// fit in registers and GCC keeps accumulators (touched once per tile) on
// the stack; still faster than scaling the weights: batch 3 / 4 / 8 at
// 12.3 / 10.7 / 5.4 GB/s against 11.0 / 9.8 / 4.9 (bench --resident 256 x
// 4096), and than two rows side by side (11.2 / 9.9 / 5.0).
template <int R, int T>
void fp8_rows(const uint8_t* w0, int64_t ldw, const float* tile_scale /*x 2^8*/, int64_t cols,
              const uint8_t* const* acts, float* dots) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  // One 128-column tile from c0; masked: the row's last, partial tile (its
  // chunks read with masks). Full tiles loop apart from it, as in bf16_rows.
  auto tile = [&](int64_t c0, auto masked) __attribute__((always_inline)) {
    const __m512 s = _mm512_set1_ps(tile_scale[c0 / 128]);
    const int64_t width = cols - c0 < 128 ? cols - c0 : 128;
    const uint8_t* row[R];
    for (int r = 0; r < R; ++r) row[r] = w0 + r * ldw + c0;
    __m512 tmp[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) tmp[r][t] = _mm512_setzero_ps();
    auto chunk = [&](int64_t col, int64_t n) {
      __m512 lo[R], hi[R];
      for (int r = 0; r < R; ++r) {
        // kPrefetch ahead in this row; near its end, into the same row of
        // the next block of R (rows are contiguous): memory is consumed in
        // that order, and each 4 KB row is its own page, so the hardware
        // prefetcher (which stops at page boundaries) restarts on every
        // row. One line per 64 columns, as they are consumed (all of a
        // tile's lines at its start lost 10% of DRAM decode speed).
        if (kPrefetch && (col & 63) == 0) {
          const uint8_t* ahead = row[r] + col + kPrefetch + (c0 + col + kPrefetch < cols ? 0 : (R - 1) * ldw);
          _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
        }
        if constexpr (decltype(masked)::value) fp8_chunk(row[r] + col, n, &lo[r], &hi[r]);
        else e4m3x32_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + col)), &lo[r], &hi[r]);
      }
      for (int t = 0; t < T; ++t) {
        const float* xt = reinterpret_cast<const float*>(acts[t]) + c0 + col;
        const __m512 xl = _mm512_load_ps(xt), xh = _mm512_load_ps(xt + 16);
        for (int r = 0; r < R; ++r) {
          tmp[r][t] = _mm512_fmadd_ps(lo[r], xl, tmp[r][t]);
          tmp[r][t] = _mm512_fmadd_ps(hi[r], xh, tmp[r][t]);
        }
      }
    };
    if constexpr (decltype(masked)::value) {
      for (int64_t col = 0; col < width; col += 32) chunk(col, width - col);
    } else {
      for (int64_t col = 0; col < 128; col += 32) chunk(col, 32);
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(tmp[r][t], s, acc[r][t]);
  };
  const int64_t full = cols / 128 * 128;
  for (int64_t c0 = 0; c0 < full; c0 += 128) tile(c0, Masked<false>{});
  if (full < cols) tile(full, Masked<true>{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) dots[r * T + t] = _mm512_reduce_add_ps(acc[r][t]);
}

// ============================================================================
// BF16 and F32
// ============================================================================

// dots[r * T + t] = sum over cols of W[r] * x_t for R rows of `ldw` bytes
// starting at w0. Per (row, token) pair, for every R and T: per 32 columns
// in column order acc = fma(even, x_even, acc), acc = fma(odd, x_odd, acc),
// then one horizontal sum (batch invariance; the same arithmetic as the
// one-row form this replaced, so results are bitwise unchanged).
//
// Why R rows: with one row the pair's accumulator is one chain of two
// dependent FMAs per 64 bytes, 8 cycles at FMA latency 4, which held one
// token to ~8 bytes per cycle per core; and at 4 tokens one row streams the
// tokens' 64 KB of x from L2 per 8 KB row (8 x loads per 8 FMAs, the L2's
// 64 bytes per cycle), which held the LM head at 8 tokens to ~25% of the
// FMA peak. R = 4 rows give R chains per token and share each x load
// over R rows.
template <int R, int T>
void bf16_rows(const uint8_t* w0, int64_t ldw, int64_t cols, const uint8_t* const* acts, float* dots) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i hi_mask = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  // 32 columns from c; kMasked: the row's last, partial 32.
  auto step = [&](int64_t c, auto masked) __attribute__((always_inline)) {
    __m512 even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w0 + r * ldw + 2 * c;
      // kPrefetch ahead in this row; past its end, into the same row of
      // the next block of R (the order memory is consumed in).
      if (kPrefetch) {
        const uint8_t* ahead = p + kPrefetch + (2 * c + kPrefetch < ldw ? 0 : (R - 1) * ldw);
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      }
      __m512i v;
      if constexpr (decltype(masked)::value) v = _mm512_maskz_loadu_epi16(__mmask32((1ull << (cols - c)) - 1), p);
      else v = _mm512_loadu_si512(p);
      even[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
    }
    for (int t = 0; t < T; ++t) {
      const float* xt = reinterpret_cast<const float*>(acts[t]) + c;
      const __m512 xe = _mm512_load_ps(xt), xo = _mm512_load_ps(xt + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(even[r], xe, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(odd[r], xo, acc[r][t]);
      }
    }
  };
  // The full columns in a loop of their own: with the masked tail's branch
  // inside it, GCC stored all R x T accumulators to the stack on every
  // iteration (16 zmm stores per 32 FMAs at R = T = 4).
  const int64_t full = cols / 32 * 32;
  for (int64_t c = 0; c < full; c += 32) step(c, Masked<false>{});
  if (full < cols) step(full, Masked<true>{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) dots[r * T + t] = _mm512_reduce_add_ps(acc[r][t]);
}

// BF16 rows [r0, r1) x tokens [t0, t0 + T), kBf16Rows at a time.
constexpr int kBf16Rows = 4;
template <int T>
void bf16_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                const RowsOut& out) {
  const int64_t ldw = w.cols * 2;
  int64_t r = r0;
  for (; r + kBf16Rows <= r1; r += kBf16Rows) {
    float dots[kBf16Rows * T];
    bf16_rows<kBf16Rows, T>(w.data + r * ldw, ldw, w.cols, acts, dots);
    for (int i = 0; i < kBf16Rows; ++i) store_row<T>(out, r + i, t0, dots + i * T, 1.0f);
  }
  for (; r < r1; ++r) {
    float dots[T];
    bf16_rows<1, T>(w.data + r * ldw, ldw, w.cols, acts, dots);
    store_row<T>(out, r, t0, dots, 1.0f);
  }
}

template <int T>
void f32_row(const uint8_t* wrow, int64_t cols, const uint8_t* const* acts, float* dots) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const float* w = reinterpret_cast<const float*>(wrow);
  for (int64_t c = 0; c < cols; c += 16) {
    if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + c) + kPrefetch, _MM_HINT_T0);
    __m512 v;
    if (c + 16 <= cols) v = _mm512_loadu_ps(w + c);
    else v = _mm512_maskz_loadu_ps(__mmask16((1u << (cols - c)) - 1), w + c);
    for (int t = 0; t < T; ++t) {
      const float* xt = reinterpret_cast<const float*>(acts[t]) + c;
      acc[t] = _mm512_fmadd_ps(v, _mm512_load_ps(xt), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) dots[t] = _mm512_reduce_add_ps(acc[t]);
}

// ============================================================================
// Row ranges: the GEMV / GEMM driver
// ============================================================================

// Bytes of one weight row (data only), to size row tiles.
int64_t row_bytes(const RawWeights& w) {
  switch (w.kind) {
    case WeightKind::mxfp4:
    case WeightKind::nvfp4:
    case WeightKind::int4: return w.cols / 2;
    case WeightKind::fp8_ue8m0:
    case WeightKind::fp8_f32: return w.cols;
    case WeightKind::bf16: return w.cols * 2;
    case WeightKind::f32: return w.cols * 4;
  }
  return w.cols;
}

// The scales of tiles [c0, c0 + nt) of 128-row band `band`, as f32 with
// the 2^8 of e4m3x32_to_f32 folded in (both FP8 passes use them).
void band_tile_scales(const RawWeights& w, int64_t band, int64_t c0, int64_t nt, float* out) {
  const int64_t tiles = (w.cols + 127) / 128;
  for (int64_t c = 0; c < nt; ++c) {
    const int64_t si = band * tiles + c0 + c;
    const float sv = w.kind == WeightKind::fp8_ue8m0 ? ue8m0_value(w.scales[si]) : load_f32(w.scales + 4 * si);
    out[c] = sv * 256.0f;
  }
}

// FP8 rows [r0, r1) x tokens [t0, t0 + T): 4 rows at a time within a
// 128-row band, 64 tiles (8192 columns) of scales at a time.
template <int T>
void fp8_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
               const RowsOut& out) {
  const int64_t cols = w.cols, tiles = (cols + 127) / 128;
  float tile_scale[64];  // one band's scales for 64 tiles, 2^8 folded in
  int64_t have_band = -1, have_c0 = -1;
  for (int64_t r = r0; r < r1;) {
    const int64_t band = r / 128;
    const bool four = r1 - r >= 4 && (band + 1) * 128 - r >= 4;
    float dots[4 * T] = {};
    for (int64_t c0 = 0; c0 < tiles; c0 += 64) {
      const int64_t nt = tiles - c0 < 64 ? tiles - c0 : 64;
      if (band != have_band || c0 != have_c0) {
        band_tile_scales(w, band, c0, nt, tile_scale);
        have_band = band;
        have_c0 = c0;
      }
      const int64_t span = (c0 + nt) * 128 < cols ? nt * 128 : cols - c0 * 128;
      const uint8_t* shifted[T];
      for (int t = 0; t < T; ++t) shifted[t] = acts[t] + c0 * 128 * 4;
      float part[4 * T];
      if (four) fp8_rows<4, T>(w.data + r * cols + c0 * 128, cols, tile_scale, span, shifted, part);
      else fp8_rows<1, T>(w.data + r * cols + c0 * 128, cols, tile_scale, span, shifted, part);
      for (int i = 0; i < (four ? 4 : 1) * T; ++i) dots[i] += part[i];
    }
    for (int i = 0; i < (four ? 4 : 1); ++i) store_row<T>(out, r + i, t0, dots + i * T, 1.0f);
    r += four ? 4 : 1;
  }
}

// FP8 rows [r0, r1) x kManyTokens tokens from t0, two rows at a time, so
// each decoded weight vector feeds 8 FMAs and each activation vector
// loaded feeds 2 (fp8_rows at 4 rows x 4 tokens shares a decode among 4,
// and its 16 temporaries plus 16 accumulators spill); a block's odd last
// row runs alone. Per 32 weights of a
// row: 1 load, 5 decode ops, 16 FMAs, 8 activation loads. Two rows instead
// of one (2026-12-08, Zen 5, bench --resident 512 x 4096, 8-512 tokens):
// 148-161 -> 163-179 GFLOP/s of a 263 peak (0.56-0.61 -> 0.62-0.68), as for
// FP4 (fp4_range_many).
// One row's 8 tokens read 4 KB of activations per tile, so rows go
// in blocks of kManyRows (in one 128-row band: one set of tile scales)
// over chunks of kFp8ManyTiles tiles (16 KB of activations, in L1 while the
// block's rows pass over them); between chunks a row's accumulators wait
// in memory, which changes no result. Per (row, token) pair this is
// fp8_rows's arithmetic in its order, and fp8_range's (a horizontal sum per
// 64 tiles, the sums added from 0): the same results as passes of 1..4.
// (Tried for BF16 too, with bf16_rows's one chain per pair: from DRAM it ran
// at 0.72-0.85x the passes of 4, interleaved A/B, so BF16 keeps those.)
constexpr int kManyTokens = 8;
constexpr int64_t kManyRows = 16;
constexpr int64_t kFp8ManyTiles = 4;

void fp8_range_many(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                    const RowsOut& out) {
  constexpr int T = kManyTokens;
  const int64_t cols = w.cols, tiles = (cols + 127) / 128;
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(acts[t]);
  float tile_scale[64];  // as in fp8_range
  alignas(64) float state[kManyRows * T * 16];
  for (int64_t rb = r0; rb < r1;) {
    const int64_t band = rb / 128, band_end = (band + 1) * 128;
    const int64_t end = r1 < band_end ? r1 : band_end;
    const int64_t nr = end - rb < kManyRows ? end - rb : kManyRows;
    float dots[kManyRows * T] = {};
    for (int64_t c0 = 0; c0 < tiles; c0 += 64) {
      const int64_t nt = tiles - c0 < 64 ? tiles - c0 : 64;
      band_tile_scales(w, band, c0, nt, tile_scale);
      for (int64_t i = 0; i < nr * T * 16; i += 16) _mm512_store_ps(state + i, _mm512_setzero_ps());
      for (int64_t s0 = c0; s0 < c0 + nt; s0 += kFp8ManyTiles) {
        const int64_t s1 = s0 + kFp8ManyTiles < c0 + nt ? s0 + kFp8ManyTiles : c0 + nt;
        // Rows i .. i + R - 1 of the block over this chunk: R = 2, or 1 for
        // a block's odd last row.
        auto rows = [&](int64_t i, auto count) __attribute__((always_inline)) {
          constexpr int R = decltype(count)::value;
          const uint8_t* wrow = w.data + (rb + i) * cols;
          // Each row's next chunk, all its lines, a block's worth of work
          // ahead of its use (a block's rows are kManyRows separate
          // streams); after a row's last chunk, the first chunk of the same
          // row of the next block (else each block would start on kManyRows
          // demand misses). A prefetch past the data is harmless.
          for (int r = 0; r < R; ++r) {
            const uint8_t* ahead = s1 < tiles ? wrow + r * cols + 128 * s1 : w.data + (rb + nr + i + r) * cols;
            for (int64_t b = 0; b < kFp8ManyTiles * 128; b += 64)
              _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
          }
          float* st = state + i * T * 16;
          // Tile c of the rows (width columns; masked: their chunks read
          // with masks, the row's last, partial tile, as in fp8_rows), each
          // activation vector loaded once for all R rows; the accumulators
          // (row r's at st + r * T * 16) go through memory once per tile, as
          // at R = 2 the 2T temporaries fill the registers.
          auto tile = [&](int64_t c, int64_t width, auto masked) __attribute__((always_inline)) {
            __m512 tmp[R][T];
            for (int r = 0; r < R; ++r)
              for (int t = 0; t < T; ++t) tmp[r][t] = _mm512_setzero_ps();
            for (int64_t col = 0; col < width; col += 32) {
              __m512 lo[R], hi[R];
              for (int r = 0; r < R; ++r) {
                const uint8_t* p = wrow + r * cols + 128 * c + col;
                if constexpr (decltype(masked)::value) fp8_chunk(p, width - col, &lo[r], &hi[r]);
                else e4m3x32_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), &lo[r], &hi[r]);
              }
              for (int t = 0; t < T; ++t) {
                const float* xt = x[t] + 128 * c + col;
                __m512 xl = _mm512_load_ps(xt), xh = _mm512_load_ps(xt + 16);
                // In registers: else GCC reloads them for each row.
                asm("" : "+v"(xl), "+v"(xh));
                for (int r = 0; r < R; ++r) {
                  tmp[r][t] = _mm512_fmadd_ps(lo[r], xl, tmp[r][t]);
                  tmp[r][t] = _mm512_fmadd_ps(hi[r], xh, tmp[r][t]);
                }
              }
            }
            const __m512 s = _mm512_set1_ps(tile_scale[c - c0]);
            for (int r = 0; r < R; ++r)
              for (int t = 0; t < T; ++t) {
                float* a = st + (r * T + t) * 16;
                _mm512_store_ps(a, _mm512_fmadd_ps(tmp[r][t], s, _mm512_load_ps(a)));
              }
          };
          const int64_t s_full = s1 * 128 <= cols ? s1 : s1 - 1;
          for (int64_t c = s0; c < s_full; ++c) tile(c, 128, Masked<false>{});
          if (s_full < s1) tile(s_full, cols - 128 * s_full, Masked<true>{});
        };
        int64_t i = 0;
        for (; i + 2 <= nr; i += 2) rows(i, Count<2>{});
        if (i < nr) rows(i, Count<1>{});
      }
      for (int64_t i = 0; i < nr * T; ++i) dots[i] += _mm512_reduce_add_ps(_mm512_load_ps(state + 16 * i));
    }
    for (int64_t i = 0; i < nr; ++i) store_row<T>(out, rb + i, t0, dots + i * T, 1.0f);
    rb += nr;
  }
}

// Rows [r0, r1) x tokens [t0, t0 + T) into out.
template <int T>
void rows_tokens(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                 ActsClass cls, const RowsOut& out) {
  if (w.kind == WeightKind::fp8_ue8m0 || w.kind == WeightKind::fp8_f32) {
    fp8_range<T>(w, r0, r1, acts, t0, out);
    return;
  }
  if ((w.kind == WeightKind::mxfp4 || w.kind == WeightKind::nvfp4) && cls == ActsClass::f32_fp4) {
    fp4_f32_rows_avx512(w, r0, r1, acts, T, t0, out);
    return;
  }
  if (w.kind == WeightKind::int4) {  // int4_f32_avx512.cpp, int4_int8_avx512.cpp
    if (cls == ActsClass::int8_int4) int4_int8_rows_avx512(w, r0, r1, acts, T, t0, out);
    else int4_f32_rows_avx512(w, r0, r1, acts, T, t0, out);
    return;
  }
  if (w.kind == WeightKind::bf16) {
    bf16_range<T>(w, r0, r1, acts, t0, out);
    return;
  }
  float dots[T] = {};
  const int64_t cols = w.cols;
  for (int64_t r = r0; r < r1; ++r) {
    float scale = 1.0f;
    switch (w.kind) {
      case WeightKind::mxfp4:
        fp4_row<T, false>(w.data + r * (cols / 2), w.scales + r * (cols / 32), cols, acts, dots);
        scale = 0.5f;
        break;
      case WeightKind::nvfp4:
        fp4_row<T, true>(w.data + r * (cols / 2), w.scales + r * (cols / 16), cols, acts, dots);
        scale = 0.5f * 256.0f * w.global_scale;
        break;
      case WeightKind::f32:
        f32_row<T>(w.data + r * cols * 4, cols, acts, dots);
        break;
      case WeightKind::bf16:       // bf16_range
      case WeightKind::fp8_ue8m0:
      case WeightKind::fp8_f32:
      case WeightKind::int4: break;  // fp8_range, int4_f32_*
    }
    store_row<T>(out, r, t0, dots, scale);
  }
}

template <int T>
void rows_tokens_at(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a, int64_t t0,
                    const RowsOut& out) {
  const uint8_t* acts[T];
  token_rows(a, t0, T, acts);
  rows_tokens<T>(w, r0, r1, acts, t0, a.cls, out);
}

}  // namespace

// ============================================================================
// Entry points
// ============================================================================

int64_t acts_stride_avx512(ActsClass c, int64_t cols) {
  const int64_t padded = round_up(cols, kGroup);
  switch (c) {
    case ActsClass::int8_blocks: return padded / kGroup * kGroupBytes;
    case ActsClass::int8_int4: return int4_int8_stride_avx512(cols);
    case ActsClass::f32_even_odd:
    case ActsClass::f32_plain:
    case ActsClass::f32_fp4:
    case ActsClass::f32_int4:
    case ActsClass::int16_fp4:  // AVX2 only (cpu_avx2_int16)
    case ActsClass::bf16x3: break;  // (linear_amx.cpp's own stride)
  }
  return padded * 4;
}

void prepare_acts_avx512(ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out) {
  const int64_t stride = acts_stride_avx512(c, cols);
  for (int64_t t = 0; t < n; ++t) {
    uint8_t* o = out + t * stride;
    switch (c) {
      case ActsClass::int8_blocks: quantize_int8_token(x + t * cols, cols, o); break;
      case ActsClass::f32_plain: copy_plain_token(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_even_odd: split_even_odd_token(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_fp4: fp4_f32_prepare_avx512(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_int4: int4_f32_prepare_avx512(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::int8_int4: int4_int8_prepare_avx512(x + t * cols, cols, o); break;
      case ActsClass::int16_fp4:      // AVX2 only (cpu_avx2_int16)
      case ActsClass::bf16x3: break;  // linear_amx.cpp's
    }
  }
}

void linear_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a,
                        const RowsOut& out) {
  // Tokens go in groups of kTokens (their activations stay in L1, their
  // accumulators in registers). With more tokens than one group, row tiles
  // of ~256 KB stay in L2 while every group passes over them: the weights
  // come from DRAM once per call, whatever the batch.
  const int64_t rb = row_bytes(w) > 0 ? row_bytes(w) : 1;
  int64_t tile = (256 * 1024) / rb;
  if (tile < 4) tile = 4;
  if (a.n <= kTokens) tile = r1 - r0;
  // Exact FP4 and FP8: passes of 8 tokens while that many are left
  // (fp4_range_many, fp8_range_many: each decoded weight serves them all,
  // one row at a time), then passes of up to 4. Two threads from DRAM,
  // interleaved A/B against passes of 4, median time: MXFP4 8 / 16 tokens
  // 1.15 / 1.21x faster at 4096^2 and 1.07 / 1.08x at 16384^2, NVFP4 4096^2
  // 1.17 / 1.13x, FP8 4096^2 1.19 / 1.09x and 16384^2 1.23x at 8
  // (bench/results/1500_many_token_passes.txt). Until the prefetch of the
  // next block's rows (see there), FP4 lost at 8-16 tokens to the noise and
  // ran these passes only from 32 tokens on.
  const bool fp4_many = a.cls == ActsClass::f32_fp4 && (w.kind == WeightKind::mxfp4 || w.kind == WeightKind::nvfp4);
  const bool fp8_many = w.kind == WeightKind::fp8_ue8m0 || w.kind == WeightKind::fp8_f32;
  for (int64_t rt = r0; rt < r1; rt += tile) {
    const int64_t re = rt + tile < r1 ? rt + tile : r1;
    for (int64_t t0 = 0, nt = 0; t0 < a.n; t0 += nt) {
      if (fp4_many && a.n - t0 >= kFp4ManyTokensAvx512) {
        nt = kFp4ManyTokensAvx512;
        const uint8_t* acts[kFp4ManyTokensAvx512];
        token_rows(a, t0, nt, acts);
        fp4_f32_rows_avx512(w, rt, re, acts, int(nt), t0, out);
        continue;
      }
      if (fp8_many && a.n - t0 >= kManyTokens) {
        nt = kManyTokens;
        const uint8_t* acts[kManyTokens];
        token_rows(a, t0, nt, acts);
        fp8_range_many(w, rt, re, acts, t0, out);
        continue;
      }
      nt = pass_tokens(a.n - t0, kTokens);
      switch (nt) {
        case 1: rows_tokens_at<1>(w, rt, re, a, t0, out); break;
        case 2: rows_tokens_at<2>(w, rt, re, a, t0, out); break;
        case 3: rows_tokens_at<3>(w, rt, re, a, t0, out); break;
        default: rows_tokens_at<4>(w, rt, re, a, t0, out); break;
      }
    }
  }
}

// ----------------------------------------------------------------------------
// SwiGLU with the DeepSeek-V4 clamp, vectorised (decode runs it on every
// selected expert's [inter] activations).
// ----------------------------------------------------------------------------

namespace {

// e^x for x in [-87.3, 88.7] (callers clamp): 2^(x log2 e) split into 2^n via
// vscalefps and 2^f, f in [-0.5, 0.5], by a degree-6 polynomial (relative
// error below 2e-7, near f32 rounding).
inline __m512 exp_ps(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  __m512 t = _mm512_mul_ps(x, log2e);
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // f = x*log2e - n computed as (x - n*ln2_hi - n*ln2_lo) * log2e for accuracy.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  // e^r, |r| <= 0.35: Taylor to degree 6.
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

void swiglu_avx512(float* g, const float* u, int64_t n, float limit) {
  const bool clamp = limit > 0.0f;
  const __m512 hi = _mm512_set1_ps(limit), lo = _mm512_set1_ps(-limit);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    if (clamp) {
      gv = _mm512_min_ps(gv, hi);
      uv = _mm512_max_ps(_mm512_min_ps(uv, hi), lo);
    }
    // silu(g) = g / (1 + e^-g); e^-g clamped to stay finite (g < -88 gives ~0).
    __m512 e = exp_ps(_mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv),
                                                  _mm512_set1_ps(-87.0f)),
                                    _mm512_set1_ps(88.0f)));
    __m512 s = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, uv));
  }
}

}  // namespace nibble::x86
