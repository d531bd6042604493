// AVX2 linear kernels (+FMA, F16C): Y[n, rows] = X · W^T for MXFP4, NVFP4,
// FP8 block-128, BF16 and F32 weights in their stored format. The same
// schemes as linear_avx512.cpp (read that first) at half the width: the
// opt-in lossy FP4 path via a vpshufb table and vpmaddubsw/vpmaddwd against
// int8 activations, FP8 via exact E4M3 -> f16 bit moves and vcvtph2ps, BF16
// by shifts. The default, exact FP4 path is fp4_f32_avx2.cpp.
//
// Batch invariance, as in linear_avx512.cpp: every path computes a (row,
// token) dot product with the same operations in the same order whatever
// the tokens per pass, the rows per block, the thread's row range and the
// token's place in the batch; nothing is summed across tokens or rows. FP8:
// see fp8_rows; exact FP4: fp4_f32_avx2.cpp; BF16: see bf16_rows; int8
// FP4: one accumulator chain per (row, token) pair, kept in memory between
// column chunks (fp4_int8_range), int8 quantization per token; F32: one
// row at a time, one accumulator chain per token.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx2.h here, no
// STL, everything but the entry points in an anonymous namespace (see
// kernels_x86.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx2.h"

namespace nibble::x86 {

namespace {

// int8_blocks layout, per group of 64 elements (2 blocks of 32) and token,
// 128 bytes:
//   [ 0.. 31] q of the even elements, block b's 16 evens at 16b   (int8)
//   [32.. 63] q of the odd elements                                (int8)
//   [64.. 95] corr[8]: dword 4b+j = -12 * sum q[b][8j .. 8j+7]    (int32)
//   [96..127] xs[8]:   dword 4b+j = scale of block b               (f32)
// f32_plain: x zero-padded to a multiple of 128. f32_even_odd: per 16
// elements, 8 evens then 8 odds. f32_fp4: see fp4_f32_avx2.cpp (the size of
// f32_plain).
constexpr int64_t kGroup = 64;
constexpr int64_t kGroupBytes = 128;
constexpr int64_t kTokens = 4;       // tokens per pass over a row tile

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void quantize_int8_token(const float* x, int64_t cols, uint8_t* out) {
  const int64_t groups = round_up(cols, kPad) / kGroup;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i twelve = _mm256_set1_epi8(12);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float tmp[32];
  alignas(32) int32_t q[32];
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* grp = out + g * kGroupBytes;
    int8_t* ev = reinterpret_cast<int8_t*>(grp);
    int8_t* od = reinterpret_cast<int8_t*>(grp + 32);
    float* xs = reinterpret_cast<float*>(grp + 96);
    for (int b = 0; b < 2; ++b) {
      const int64_t base = g * kGroup + 32 * b;
      const int64_t left = cols - base;
      if (left <= 0) {
        for (int j = 0; j < 16; ++j) ev[16 * b + j] = od[16 * b + j] = 0;
        for (int j = 0; j < 4; ++j) xs[4 * b + j] = 0.0f;
        continue;
      }
      const float* src = x + base;
      if (left < 32) {  // NVFP4 allows a last block of 16
        for (int i = 0; i < 32; ++i) tmp[i] = i < left ? x[base + i] : 0.0f;
        src = tmp;
      }
      __m256 v[4];
      __m256 m = _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(src + 8 * k);
        m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs_mask));
      }
      const float amax = hmax(m);
      const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      for (int k = 0; k < 4; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * k), _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv)));
      for (int j = 0; j < 16; ++j) {
        ev[16 * b + j] = int8_t(q[2 * j]);
        od[16 * b + j] = int8_t(q[2 * j + 1]);
      }
      for (int j = 0; j < 4; ++j) xs[4 * b + j] = amax / 127.0f;
    }
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp));
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32));
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(twelve, lo), _mm256_maddubs_epi16(twelve, hi));
    __m256i c = _mm256_madd_epi16(s, ones);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(grp + 64), _mm256_sub_epi32(_mm256_setzero_si256(), c));
  }
}

void copy_plain_token(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kPad);
  for (int64_t c = 0; c < padded; ++c) out[c] = c < cols ? x[c] : 0.0f;
}

void split_even_odd_token(const float* x, int64_t cols, float* out) {
  const int64_t padded = round_up(cols, kPad);
  for (int64_t c = 0; c < padded; c += 16)
    for (int j = 0; j < 8; ++j) {
      out[c + j] = c + 2 * j < cols ? x[c + 2 * j] : 0.0f;
      out[c + 8 + j] = c + 2 * j + 1 < cols ? x[c + 2 * j + 1] : 0.0f;
    }
}

// ---- FP4 ----------------------------------------------------------------------

// Scales: mx_scales and nv_pair_scales; rows, blocks and column chunks:
// fp4_int_range (all in simd_avx2.h).

// The int8 kernel of fp4_int_range (simd_avx2.h): one group of one row
// against T tokens (the int8_blocks layout above).
struct Int8Fp4 {
  template <int T>
  static void step(__m256i v, __m256 ws, const uint8_t* const* acts, int64_t g, __m256* acc) {
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
    __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = acts[t] + g * kGroupBytes;
      // u8 (<= 24) x s8 (|q| <= 127): pair sums <= 6096, the two halves' sum
      // <= 12192, so the 16-bit steps never saturate.
      __m256i p = _mm256_add_epi16(
          _mm256_maddubs_epi16(lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(a))),
          _mm256_maddubs_epi16(hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 32))));
      __m256i d = _mm256_add_epi32(_mm256_madd_epi16(p, ones),
                                   _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 64)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),
                               _mm256_mul_ps(ws, _mm256_load_ps(reinterpret_cast<const float*>(a + 96))), acc[t]);
    }
  }
};

// Int8 FP4 rows [r0, r1) x tokens [t0, t0 + T).
template <int T, bool kNv>
void fp4_int8_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                    const RowsOut& out) {
  const float scale = kNv ? 0.5f * 256.0f * w.global_scale : 0.5f;  // 2w in the table, nv_pair_scales' 2^-8
  fp4_int_range<Int8Fp4, T, kNv>(w, r0, r1, acts, t0, out, scale, kPrefetch);
}

// ---- FP8 block-128 ---------------------------------------------------------------

// A compile-time flag for a lambda's argument (no <type_traits> here).
template <bool B>
struct Masked {
  static constexpr bool value = B;
};

inline float ue8m0_value(uint8_t e) {
  if (e == 0) return bits_to_float(0x00400000u);
  if (e == 255) return bits_to_float(0x7FC00000u);
  return bits_to_float(uint32_t(e) << 23);
}

// 16 E4M3 codes -> two vectors of 8 f32 (values times 2^-8, exact).
inline void e4m3x16_to_f32(__m128i codes, __m256* lo, __m256* hi) {
  __m256i f = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7),
                               _mm256_set1_epi16(int16_t(0xBF80)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(f));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(f, 1));
}

// 16 E4M3 codes of a row at p (n <= 16 of them exist) as two f32 vectors.
inline void fp8_chunk(const uint8_t* p, int64_t n, __m256* lo, __m256* hi) {
  __m128i codes;
  if (n >= 16) {
    codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) uint8_t buf[64];
    copy_tail(p, n, buf);
    codes = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  e4m3x16_to_f32(codes, lo, hi);
}

// dots[r * T + t] for R rows of stride ldw in one 128-row band: the R rows
// share every activation load (see linear_avx512.cpp). Batch invariance:
// every (row, token) pair runs the same operations for every R and T: per
// 128-column tile, tmp = 0, two FMAs per 16 columns in column order, then
// acc = fma(tmp, tile scale, acc); one horizontal sum at the end. (Before,
// R * T > 2 multiplied the scale into the widened weights instead.) From
// R * T = 4 on, temporaries, accumulators and decoded weights reach AVX2's
// 16 registers and GCC keeps some on the stack; still faster than the
// scaled form: batch
// 2 / 3 / 4 / 8 at 12.6 / 10.5 / 8.8 / 4.4 GB/s against 10.7 / 9.1 / 7.9 /
// 3.9 (bench --resident 256 x 4096), and than one row at a time (10.8 /
// 9.3 / 8.3 / 4.1).
template <int R, int T>
void fp8_rows(const uint8_t* w0, int64_t ldw, const float* tile_scale, int64_t cols,
              const uint8_t* const* acts, float* dots) {
  // From 5 tokens the accumulators wait in memory between tiles (touched
  // once per 128 columns), leaving the registers to the 2T temporaries,
  // which take every FMA, the 4 weight vectors and x (15 of 16 at T = 6).
  // The same operations per (row, token) pair either way. 5 / 6 tokens ran
  // as passes of 3 + 2 / 3 + 3 before, decoding every weight twice: bench
  // --resident 1024 x 4096, Zen 3, 4.3-4.4 / 3.9-4.1 -> 5.4-5.9 / 4.4-5.2
  // GB/s; R = 1 with up to 8 tokens in memory lost from 6 tokens (x loaded
  // once per FMA). bench/results/0820_avx2_fp8_passes_of_6.txt.
  constexpr bool kAccInMemory = T > 4;
  __m256 acc[kAccInMemory ? 1 : R][kAccInMemory ? 1 : T];
  alignas(32) float acc_mem[kAccInMemory ? R * T * 8 : 8];
  if constexpr (kAccInMemory) {
    for (int i = 0; i < R * T * 8; ++i) acc_mem[i] = 0.0f;
  } else {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  // One 128-column tile from c0; masked: the row's last, partial tile. Full
  // tiles loop apart from it (see bf16_rows).
  auto tile = [&](int64_t c0, auto masked) __attribute__((always_inline)) {
    const __m256 s = _mm256_set1_ps(tile_scale[c0 / 128]);
    const int64_t width = cols - c0 < 128 ? cols - c0 : 128;
    const uint8_t* row[R];
    for (int r = 0; r < R; ++r) row[r] = w0 + r * ldw + c0;
    __m256 tmp[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) tmp[r][t] = _mm256_setzero_ps();
    auto chunk = [&](int64_t col, int64_t n) {
      __m256 lo[R], hi[R];
      for (int r = 0; r < R; ++r) {
        // One line per 64 columns, as they are consumed (see the AVX-512 file).
        if ((col & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(row[r] + col + kPrefetch), _MM_HINT_T0);
        if constexpr (decltype(masked)::value) fp8_chunk(row[r] + col, n, &lo[r], &hi[r]);
        else e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + col)), &lo[r], &hi[r]);
      }
      for (int t = 0; t < T; ++t) {
        const float* xt = reinterpret_cast<const float*>(acts[t]) + c0 + col;
        const __m256 xl = _mm256_load_ps(xt), xh = _mm256_load_ps(xt + 8);
        for (int r = 0; r < R; ++r) {
          tmp[r][t] = _mm256_fmadd_ps(lo[r], xl, tmp[r][t]);
          tmp[r][t] = _mm256_fmadd_ps(hi[r], xh, tmp[r][t]);
        }
      }
    };
    if constexpr (decltype(masked)::value) {
      for (int64_t col = 0; col < width; col += 16) chunk(col, width - col);
    } else {
      for (int64_t col = 0; col < 128; col += 16) chunk(col, 16);
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) {
        if constexpr (kAccInMemory) {
          float* a = acc_mem + (r * T + t) * 8;
          _mm256_store_ps(a, _mm256_fmadd_ps(tmp[r][t], s, _mm256_load_ps(a)));
        } else {
          acc[r][t] = _mm256_fmadd_ps(tmp[r][t], s, acc[r][t]);
        }
      }
  };
  const int64_t full = cols / 128 * 128;
  for (int64_t c0 = 0; c0 < full; c0 += 128) tile(c0, Masked<false>{});
  if (full < cols) tile(full, Masked<true>{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      dots[r * T + t] = hsum(kAccInMemory ? _mm256_load_ps(acc_mem + (r * T + t) * 8) : acc[r][t]);
}

// ---- BF16 and F32 ----------------------------------------------------------------

// dots[r * T + t] for R rows of `ldw` bytes from w0. Per (row, token), for
// every R and T: per 16 columns in column order acc = fma(even, x_even,
// acc), acc = fma(odd, x_odd, acc), then one horizontal sum (the one-row
// arithmetic this replaced: results are bitwise unchanged). R rows give R
// independent chains per token (one chain is two dependent FMAs per 32
// bytes) and share every x load (see bf16_rows in linear_avx512.cpp).
template <int R, int T>
void bf16_rows(const uint8_t* w0, int64_t ldw, int64_t cols, const uint8_t* const* acts, float* dots) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const __m256i hi_mask = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  // 16 columns from c; masked: the row's last, partial 16.
  auto step = [&](int64_t c, auto masked) __attribute__((always_inline)) {
    __m256 even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w0 + r * ldw + 2 * c;
      if ((c & 31) == 0) {
        // kPrefetch ahead; past the row's end, the same row of the next block.
        const uint8_t* ahead = p + kPrefetch + (2 * c + kPrefetch < ldw ? 0 : (R - 1) * ldw);
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      }
      __m256i v;
      if constexpr (decltype(masked)::value) {
        alignas(32) uint8_t buf[64];
        copy_tail(p, 2 * (cols - c), buf);
        v = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
      } else {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      }
      even[r] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      odd[r] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
    }
    for (int t = 0; t < T; ++t) {
      const float* xt = reinterpret_cast<const float*>(acts[t]) + c;
      const __m256 xe = _mm256_load_ps(xt), xo = _mm256_load_ps(xt + 8);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm256_fmadd_ps(even[r], xe, acc[r][t]);
        acc[r][t] = _mm256_fmadd_ps(odd[r], xo, acc[r][t]);
      }
    }
  };
  // The tail outside the loop (see bf16_rows in linear_avx512.cpp: with it
  // inside, GCC stored the accumulators on every iteration).
  const int64_t full = cols / 16 * 16;
  for (int64_t c = 0; c < full; c += 16) step(c, Masked<false>{});
  if (full < cols) step(full, Masked<true>{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) dots[r * T + t] = hsum(acc[r][t]);
}

// BF16 rows [r0, r1) x tokens [t0, t0 + T), kBf16Rows<T> at a time: AVX2's
// 16 registers hold the even / odd weight vectors, the R x T accumulators
// and x's two vectors: 4 rows at one token (14 registers), 3 at two (14),
// 2 at three and four. Zen 3, bench --resident 256 x 4096, GFLOP/s best of
// 3 interleaved rounds, rows per pass 2 / 3 / 4: two tokens 47.7 / 63.8 /
// 43.0 (2 was the rule before); three tokens 2 / 3: 58.9 / 59.4; four 65.8 /
// 61.7; one token 3 / 4 / 5: 34.6 / 44.8 / 38.5.
template <int T>
constexpr int kBf16Rows = T == 1 ? 4 : T == 2 ? 3 : 2;
template <int T>
void bf16_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                const RowsOut& out) {
  constexpr int R = kBf16Rows<T>;
  const int64_t ldw = w.cols * 2;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    float dots[R * T];
    bf16_rows<R, T>(w.data + r * ldw, ldw, w.cols, acts, dots);
    for (int i = 0; i < R; ++i) store_row<T>(out, r + i, t0, dots + i * T, 1.0f);
  }
  for (; r < r1; ++r) {
    float dots[T];
    bf16_rows<1, T>(w.data + r * ldw, ldw, w.cols, acts, dots);
    store_row<T>(out, r, t0, dots, 1.0f);
  }
}

template <int T>
void f32_row(const uint8_t* wrow, int64_t cols, const uint8_t* const* acts, float* dots) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const float* w = reinterpret_cast<const float*>(wrow);
  for (int64_t c = 0; c < cols; c += 8) {
    if ((c & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(w + c) + kPrefetch, _MM_HINT_T0);
    __m256 v;
    if (c + 8 <= cols) {
      v = _mm256_loadu_ps(w + c);
    } else {
      const int64_t left = cols - c;
      const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      v = _mm256_maskload_ps(w + c, _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(left)), idx));
    }
    for (int t = 0; t < T; ++t) {
      const float* xt = reinterpret_cast<const float*>(acts[t]) + c;
      acc[t] = _mm256_fmadd_ps(v, _mm256_load_ps(xt), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) dots[t] = hsum(acc[t]);
}

// ---- Row ranges ------------------------------------------------------------------

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

// FP8 rows [r0, r1) x tokens [t0, t0 + T): 2 rows at a time within a
// 128-row band, 64 tiles (8192 columns) of scales at a time.
template <int T>
void fp8_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
               const RowsOut& out) {
  const int64_t cols = w.cols, tiles = (cols + 127) / 128;
  float tile_scale[64];
  int64_t have_band = -1, have_c0 = -1;
  for (int64_t r = r0; r < r1;) {
    const int64_t band = r / 128;
    const bool two = r1 - r >= 2 && (band + 1) * 128 - r >= 2;
    float dots[2 * T] = {};
    for (int64_t c0 = 0; c0 < tiles; c0 += 64) {
      const int64_t nt = tiles - c0 < 64 ? tiles - c0 : 64;
      if (band != have_band || c0 != have_c0) {
        for (int64_t c = 0; c < nt; ++c) {
          const int64_t si = band * tiles + c0 + c;
          const float sv = w.kind == WeightKind::fp8_ue8m0 ? ue8m0_value(w.scales[si]) : load_f32(w.scales + 4 * si);
          tile_scale[c] = sv * 256.0f;
        }
        have_band = band;
        have_c0 = c0;
      }
      const int64_t span = (c0 + nt) * 128 < cols ? nt * 128 : cols - c0 * 128;
      const uint8_t* shifted[T];
      for (int t = 0; t < T; ++t) shifted[t] = acts[t] + c0 * 128 * 4;
      float part[2 * T];
      if (two) fp8_rows<2, T>(w.data + r * cols + c0 * 128, cols, tile_scale, span, shifted, part);
      else fp8_rows<1, T>(w.data + r * cols + c0 * 128, cols, tile_scale, span, shifted, part);
      for (int i = 0; i < (two ? 2 : 1) * T; ++i) dots[i] += part[i];
    }
    for (int i = 0; i < (two ? 2 : 1); ++i) store_row<T>(out, r + i, t0, dots + i * T, 1.0f);
    r += two ? 2 : 1;
  }
}

// ---- FP8 with more than 8 tokens: each weight decoded once per call ------------
//
// fp8_range widens every weight again for each pass of 4 tokens: 6 ops per
// 16 weights (sign extension, shift, and, two vcvtph2ps) against 8 FMAs per
// 16 weights at 4 tokens, on the pipes the FMAs need. Here a block of up
// to kFp8ManyRows rows of one 128-row band is widened chunk by chunk
// (kFp8ManyTiles tiles of 128 columns, 16 KB) into f32, and every token of
// the call runs over the chunk, 2 rows x 6 tokens at a time (see
// fp8_decoded_block). Per (row, token) pair the
// operations are fp8_rows' (per tile tmp = 0, one FMA per 8 columns in
// column order, acc = fma(tmp, tile scale, acc); per span of 64 tiles one
// hsum added to the row's sum), so results are bitwise those of 1..4
// tokens. A partial tile runs all 16 of its FMAs (fp8_rows stops after the
// last 16 columns with any): the extra products are 0 x 0 (zero codes past
// cols, zero-padded x) and tmp, begun at +0, is never -0, so they change
// nothing.
constexpr int64_t kFp8ManyTiles = 4;
constexpr int64_t kFp8ManyRows = 8;
constexpr int kFp8ManyMinTokens = 8;
constexpr int64_t kFp8ChunkRow = kFp8ManyTiles * 128;  // floats per decoded row

// Tiles [c, c + nt) of one row of `cols` columns widened into dst (zeros
// past cols); prefetches the line at pf + column every 64 columns.
void fp8_decode_part(const uint8_t* wrow, int64_t cols, int64_t c, int64_t nt, const uint8_t* pf, float* dst) {
  for (int64_t col = c * 128; col < (c + nt) * 128; col += 16) {
    if ((col & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + col), _MM_HINT_T0);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    const int64_t left = cols - col;
    if (left >= 16) e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + col)), &lo, &hi);
    else if (left > 0) fp8_chunk(wrow + col, left, &lo, &hi);
    _mm256_store_ps(dst + (col - c * 128), lo);
    _mm256_store_ps(dst + (col - c * 128) + 8, hi);
  }
}

// R rows of a decoded chunk (row r at dec + r * kFp8ChunkRow) against T
// tokens (x[t] at the chunk's first column), nt tiles with scales ts[k],
// continuing the accumulators st[r * T + t]. The accumulators stay in
// memory (touched once per tile), so that R = 2, T = 6 gives 12 independent
// FMA chains in 15 registers: a tile's chain is 16 dependent FMAs, and 6
// chains (R = 2, T = 3, accumulators in registers) left the FMAs waiting
// on latency: bench --resident 512 x 4096, 64 tokens, 71-73 GFLOP/s against
// 79-83 with 12 chains (passes of 4 tokens: 66-67; load ~10).
template <int R, int T>
void fp8_decoded_block(const float* dec, const float* ts, int64_t nt, const float* const* x, float* const* st) {
  for (int64_t k = 0; k < nt; ++k) {
    __m256 tmp[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) tmp[r][t] = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) {
      __m256 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = _mm256_load_ps(dec + r * kFp8ChunkRow + 128 * k + 8 * v);
      for (int t = 0; t < T; ++t) {
        __m256 xv = _mm256_load_ps(x[t] + 128 * k + 8 * v);
        __asm__("" : "+x"(xv));  // one load for the R rows (GCC would fold it into each FMA)
        for (int r = 0; r < R; ++r) tmp[r][t] = _mm256_fmadd_ps(wv[r], xv, tmp[r][t]);
      }
    }
    const __m256 s = _mm256_set1_ps(ts[k]);
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t)
        _mm256_store_ps(st[r * T + t], _mm256_fmadd_ps(tmp[r][t], s, _mm256_load_ps(st[r * T + t])));
  }
}

// Tokens [t, t + T) over every row of the decoded chunk (tiles from c):
// state[(i * n + t) * 8] holds row i's accumulator for token t.
template <int T>
void fp8_decoded_tokens(const float* dec, int64_t nr, const float* ts, int64_t c, int64_t nt,
                        const uint8_t* const* acts, int64_t t, int64_t n, float* state) {
  const float* x[T];
  for (int k = 0; k < T; ++k) x[k] = reinterpret_cast<const float*>(acts[t + k]) + c * 128;
  int64_t i = 0;
  for (; i + 2 <= nr; i += 2) {
    float* st[2 * T];
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < T; ++k) st[r * T + k] = state + ((i + r) * n + t + k) * 8;
    fp8_decoded_block<2, T>(dec + i * kFp8ChunkRow, ts, nt, x, st);
  }
  if (i < nr) {
    float* st[T];
    for (int k = 0; k < T; ++k) st[k] = state + (i * n + t + k) * 8;
    fp8_decoded_block<1, T>(dec + i * kFp8ChunkRow, ts, nt, x, st);
  }
}

// FP8 rows [r0, r1) x n tokens (kFp8ManyMinTokens < n <= kFp8MaxTokens).
constexpr int64_t kFp8MaxTokens = 64;
void fp8_range_many(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t n,
                    int64_t t0, const RowsOut& out) {
  const int64_t cols = w.cols, tiles = (cols + 127) / 128;
  alignas(32) float dec[kFp8ManyRows * kFp8ChunkRow];
  alignas(32) float state[kFp8ManyRows * kFp8MaxTokens * 8];
  float dots[kFp8ManyRows * kFp8MaxTokens];
  float ts[kFp8ManyTiles];
  for (int64_t r = r0; r < r1;) {
    const int64_t band = r / 128, band_end = (band + 1) * 128;
    int64_t nr = r1 - r < kFp8ManyRows ? r1 - r : kFp8ManyRows;
    if (nr > band_end - r) nr = band_end - r;
    for (int64_t i = 0; i < nr * n; ++i) dots[i] = 0.0f;
    for (int64_t span = 0; span < tiles; span += 64) {  // fp8_range's spans of 64 tiles
      const int64_t span_end = span + 64 < tiles ? span + 64 : tiles;
      for (int64_t i = 0; i < nr * n * 8; ++i) state[i] = 0.0f;
      for (int64_t c = span; c < span_end; c += kFp8ManyTiles) {
        const int64_t nt = span_end - c < kFp8ManyTiles ? span_end - c : kFp8ManyTiles;
        for (int64_t k = 0; k < nt; ++k) {
          const int64_t si = band * tiles + c + k;
          const float sv = w.kind == WeightKind::fp8_ue8m0 ? ue8m0_value(w.scales[si]) : load_f32(w.scales + 4 * si);
          ts[k] = sv * 256.0f;
        }
        for (int64_t i = 0; i < nr; ++i) {
          const uint8_t* wrow = w.data + (r + i) * cols;
          fp8_decode_part(wrow, cols, c, nt, wrow + kFp8ManyRows * cols, dec + i * kFp8ChunkRow);
        }
        int64_t t = 0;
        for (; t + 6 <= n; t += 6) fp8_decoded_tokens<6>(dec, nr, ts, c, nt, acts, t, n, state);
        switch (n - t) {
          case 1: fp8_decoded_tokens<1>(dec, nr, ts, c, nt, acts, t, n, state); break;
          case 2: fp8_decoded_tokens<2>(dec, nr, ts, c, nt, acts, t, n, state); break;
          case 3: fp8_decoded_tokens<3>(dec, nr, ts, c, nt, acts, t, n, state); break;
          case 4: fp8_decoded_tokens<4>(dec, nr, ts, c, nt, acts, t, n, state); break;
          case 5: fp8_decoded_tokens<5>(dec, nr, ts, c, nt, acts, t, n, state); break;
          default: break;
        }
      }
      for (int64_t i = 0; i < nr * n; ++i) dots[i] += hsum(_mm256_load_ps(state + 8 * i));
    }
    // Each row's tokens in order (RowsOut: repeated y_index entries add up
    // in token order).
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t t = 0; t < n; ++t) store_row<1>(out, r + i, t0 + t, dots + i * n + t, 1.0f);
    r += nr;
  }
}

// FP8 rows [r0, r1) x n <= kFp8MaxTokens tokens.
void fp8_rows_tokens(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t n,
                     int64_t t0, const RowsOut& out) {
  if (n > kFp8ManyMinTokens) {
    fp8_range_many(w, r0, r1, acts, n, t0, out);
    return;
  }
  // Passes of up to 6 tokens, in token order; 7 and 8 stay 4 + 3 and 4 + 4
  // (a 1-token pass costs nearly a full one; see fp8_rows for 5 and 6).
  run_passes_of_6(n, [&](int64_t t, auto tokens) {
    fp8_range<decltype(tokens)::value>(w, r0, r1, acts + t, t0 + t, out);
  });
}

template <int T>
void rows_tokens(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts,
                 int64_t t0, ActsClass cls, const RowsOut& out) {
  if (w.kind == WeightKind::fp8_ue8m0 || w.kind == WeightKind::fp8_f32) {
    fp8_range<T>(w, r0, r1, acts, t0, out);
    return;
  }
  if (w.kind == WeightKind::mxfp4 || w.kind == WeightKind::nvfp4) {
    if (cls == ActsClass::f32_fp4) fp4_f32_rows_avx2(w, r0, r1, acts, T, t0, out);
    else if (cls == ActsClass::int16_fp4) fp4_int16_rows_avx2(w, r0, r1, acts, T, t0, out);
    else if (w.kind == WeightKind::nvfp4) fp4_int8_range<T, true>(w, r0, r1, acts, t0, out);
    else fp4_int8_range<T, false>(w, r0, r1, acts, t0, out);
    return;
  }
  if (w.kind == WeightKind::int4) {  // int4_f32_avx2.cpp, int4_int8_avx2.cpp
    if (cls == ActsClass::int8_int4) int4_int8_rows_avx2(w, r0, r1, acts, T, t0, out);
    else int4_f32_rows_avx2(w, r0, r1, acts, T, t0, out);
    return;
  }
  if (w.kind == WeightKind::bf16) {
    bf16_range<T>(w, r0, r1, acts, t0, out);
    return;
  }
  // F32: every other kind returned above.
  float dots[T] = {};
  const int64_t cols = w.cols;
  for (int64_t r = r0; r < r1; ++r) {
    f32_row<T>(w.data + r * cols * 4, cols, acts, dots);
    store_row<T>(out, r, t0, dots, 1.0f);
  }
}

template <int T>
void rows_tokens_at(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a, int64_t t0,
                    const RowsOut& out) {
  const uint8_t* acts[T];
  token_rows(a, t0, T, acts);
  rows_tokens<T>(w, r0, r1, acts, t0, a.cls, out);
}

// e^x for x in [-87, 88]: 2^n by building the exponent field, 2^f by Taylor.
inline __m256 exp_ps(__m256 x) {
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

// ---- Entry points ----------------------------------------------------------------

int64_t acts_stride_avx2(ActsClass c, int64_t cols) {
  const int64_t padded = round_up(cols, kPad);
  if (c == ActsClass::int8_int4) return int4_int8_stride_avx2(cols);
  if (c == ActsClass::int16_fp4) return fp4_int16_stride_avx2(cols);
  return c == ActsClass::int8_blocks ? padded / kGroup * kGroupBytes : padded * 4;
}

void prepare_acts_avx2(ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out) {
  const int64_t stride = acts_stride_avx2(c, cols);
  for (int64_t t = 0; t < n; ++t) {
    uint8_t* o = out + t * stride;
    switch (c) {
      case ActsClass::int8_blocks: quantize_int8_token(x + t * cols, cols, o); break;
      case ActsClass::f32_plain: copy_plain_token(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_even_odd: split_even_odd_token(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_fp4: fp4_f32_prepare_avx2(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::f32_int4: int4_f32_prepare_avx2(x + t * cols, cols, reinterpret_cast<float*>(o)); break;
      case ActsClass::int8_int4: int4_int8_prepare_avx2(x + t * cols, cols, o); break;
      case ActsClass::int16_fp4: fp4_int16_prepare_avx2(x + t * cols, cols, o); break;
      case ActsClass::bf16x3: break;  // AVX-512 + AMX only (linear_amx.cpp)
    }
  }
}

void linear_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a,
                      const RowsOut& out) {
  // Token groups of kTokens, row tiles of ~256 KB reused from L2 by every
  // group (see linear_avx512.cpp).
  const int64_t rb = row_bytes(w) > 0 ? row_bytes(w) : 1;
  int64_t tile = (256 * 1024) / rb;
  if (tile < 2) tile = 2;
  if (a.n <= kTokens) tile = r1 - r0;
  // Exact FP4 and FP8 with more than kTokens tokens: up to 64 per call,
  // which decodes each weight once for all of them (from 9 tokens on).
  const bool fp4_many = a.n > kTokens && (a.cls == ActsClass::f32_fp4 || a.cls == ActsClass::int16_fp4) &&
                        (w.kind == WeightKind::mxfp4 || w.kind == WeightKind::nvfp4);
  const bool fp8_many = a.n > kTokens && (w.kind == WeightKind::fp8_ue8m0 || w.kind == WeightKind::fp8_f32);
  static_assert(kFp4MaxTokensAvx2 == kFp8MaxTokens);
  for (int64_t rt = r0; rt < r1; rt += tile) {
    const int64_t re = rt + tile < r1 ? rt + tile : r1;
    if (fp4_many || fp8_many) {
      for (int64_t t0 = 0; t0 < a.n; t0 += kFp8MaxTokens) {
        const int64_t nt = a.n - t0 < kFp8MaxTokens ? a.n - t0 : kFp8MaxTokens;
        const uint8_t* acts[kFp8MaxTokens];
        token_rows(a, t0, nt, acts);
        if (fp4_many && a.cls == ActsClass::int16_fp4) fp4_int16_rows_avx2(w, rt, re, acts, int(nt), t0, out);
        else if (fp4_many) fp4_f32_rows_avx2(w, rt, re, acts, int(nt), t0, out);
        else fp8_rows_tokens(w, rt, re, acts, nt, t0, out);
      }
      continue;
    }
    // Passes of 4 and the rest (not pass_tokens: BF16's 3-token pass spills,
    // and 5 / 9 tokens as 3 + 2 / 3 + 3 + 3 ran 61 / 67 against 68 / 70
    // GFLOP/s as 4 + 1 / 4 + 4 + 1).
    for (int64_t t0 = 0; t0 < a.n; t0 += kTokens) {
      switch (a.n - t0 >= kTokens ? kTokens : a.n - t0) {
        case 1: rows_tokens_at<1>(w, rt, re, a, t0, out); break;
        case 2: rows_tokens_at<2>(w, rt, re, a, t0, out); break;
        case 3: rows_tokens_at<3>(w, rt, re, a, t0, out); break;
        default: rows_tokens_at<4>(w, rt, re, a, t0, out); break;
      }
    }
  }
}

void swiglu_avx2(float* g, const float* u, int64_t n, float limit) {
  const bool clamp = limit > 0.0f;
  const __m256 hi = _mm256_set1_ps(limit), lo = _mm256_set1_ps(-limit);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
    if (clamp) {
      gv = _mm256_min_ps(gv, hi);
      uv = _mm256_max_ps(_mm256_min_ps(uv, hi), lo);
    }
    __m256 e = exp_ps(_mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv),
                                                  _mm256_set1_ps(-87.0f)),
                                    _mm256_set1_ps(88.0f)));
    // e is rounded before the add (no contraction into an FMA, whichever
    // copy of this loop GCC emits; see store_row in simd_avx2.h): the vector
    // loop and the tail below compute every element alike.
    __asm__("" : "+x"(e));
    __m256 s = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(s, uv));
  }
  if (i < n) {  // the tail through a zero-padded copy
    alignas(32) float gb[8] = {0}, ub[8] = {0};
    for (int64_t k = i; k < n; ++k) {
      gb[k - i] = g[k];
      ub[k - i] = u[k];
    }
    swiglu_avx2(gb, ub, 8, limit);
    for (int64_t k = i; k < n; ++k) g[k] = gb[k - i];
  }
}

}  // namespace nibble::x86
