// INT4 weights (compressed-tensors pack-quantized, format/int4.h) against f32
// activations on AVX-512: the default and only INT4 path. The scheme is the
// exact FP4 one of fp4_f32_avx512.cpp (read that first) with the table of
// the 16 integers q = code - 8 in place of E2M1's and BF16 group scales.
//
// Exactness. q has 4 significant bits and a BF16 scale s 8, so q * s is
// exact in f32, and each q * x is exact inside an FMA. Per 128-column step
// the kernel sums q x and multiplies the sum by the lanes' scales once: only
// the f32 accumulation rounds (the reference sums (q s) x in f64).
//
// Decoding. vpermps reads the low 4 bits of each dword index, so W_k =
// vpermps(v >> 4k, table) for the 64 bytes at p + b (see codes_from) are 16
// decoded weights, lane j = column 8j + k of the step. Lane j stays in
// 32-column block j / 4, so one vector per step holds every lane's scale:
// dword j = the BF16 scale of block 4i + j / 4 (as f32: its bits << 16).
//
// Summation order, per (row, token), for every batch size 1..4 and every row
// block (batch invariance, as fp4_f32_avx512.cpp): per 128-column step, tmp
// = W_0 x_0, tmp = fma(W_k, x_k, tmp) for k = 1..7, acc = fma(tmp, s, acc);
// per row one _mm512_reduce_add_ps(acc). The row's last step reads its bytes
// with masked loads: missing codes are 0 (q = -8) and meet zero activations.
//
// Activations (ActsClass::f32_int4): per 128 columns, 8 vectors of 16 f32,
// vector k lane j = x[8j + k], zero past cols.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx512.h here (see
// kernels_x86.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx512.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kCols = 128;  // columns per step: 64 bytes of codes

// Prefetch distance and rows per block as the exact FP4 path, which spends
// the same vector ops per cache line (fp4_f32_avx512.cpp says why).
constexpr int64_t kInt4Prefetch = 2 * kPrefetch;
constexpr int64_t kInt4PrefetchL2 = 8192;
template <int T>
constexpr int kRows = T == 1 ? 1 : 4;

// code -> q = code - 8.
inline __m512 int4_table() {
  return _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f,
                        6.0f, 7.0f);
}

// Lane scales from the four BF16 scales of a step's 32-column blocks (block
// b in bits 16b .. 16b+15): 128-bit lane b takes block b's bits into the
// high half of its dwords.
inline __m512 step_scales(uint64_t four) {
  const __m512i pick = _mm512_setr_epi32(0x01008080, 0x01008080, 0x01008080, 0x01008080, 0x03028080, 0x03028080,
                                         0x03028080, 0x03028080, 0x05048080, 0x05048080, 0x05048080, 0x05048080,
                                         0x07068080, 0x07068080, 0x07068080, 0x07068080);
  return _mm512_castsi512_ps(_mm512_shuffle_epi8(_mm512_set1_epi64(int64_t(four)), pick));
}

// The BF16 scales of step g's `blocks` (1..4) 32-column blocks, for `group`
// columns per scale (kG32: group == 32, contiguous).
template <bool kG32>
inline uint64_t step_scale_bits(const uint16_t* srow, int64_t g, int64_t group, int blocks) {
  uint64_t v = 0;
  if constexpr (kG32) {
    __builtin_memcpy(&v, srow + 4 * g, size_t(2 * blocks));
  } else {
    for (int b = 0; b < blocks; ++b) v |= uint64_t(srow[(kCols * g + 32 * b) / group]) << (16 * b);
  }
  return v;
}

// The 64 bytes from p + b (dword j = bytes 4j+b .. 4j+b+3 of the step), n of
// the step's bytes existing; kMasked: masked loads (the row's last step).
template <bool kMasked>
inline __m512i codes_from(const uint8_t* p, int64_t n, int b) {
  if constexpr (kMasked)
    return _mm512_maskz_loadu_epi8(n - b >= 64 ? ~__mmask64(0) : (__mmask64(1) << (n - b)) - 1, p + b);
  else
    return _mm512_loadu_si512(p + b);
}

// One step of R rows against T tokens (see "Summation order").
template <int R, int T, bool kMasked>
inline void step(const uint8_t* const* p, int64_t n, const __m512* s, const float* const* x, __m512 (*acc)[T]) {
  const __m512 table = int4_table();
  __m512 tmp[R][T];
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    for (int r = 0; r < R; ++r) {
      const __m512i v = codes_from<kMasked>(p[r], n, b);
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * b + h;
        const __m512 w = _mm512_permutexvar_ps(h == 0 ? v : _mm512_srli_epi32(v, 4), table);
        for (int t = 0; t < T; ++t) {
          const __m512 xk = _mm512_load_ps(x[t] + 16 * k);
          tmp[r][t] = k == 0 ? _mm512_mul_ps(w, xk) : _mm512_fmadd_ps(w, xk, tmp[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(tmp[r][t], s[r], acc[r][t]);
}

// dots[r * T + t] for R consecutive rows from codes w0 / BF16 scales s0.
template <int R, int T, bool kG32>
void int4_rows(const uint8_t* w0, const uint16_t* s0, int64_t cols, int64_t group, const float* const* acts,
               float* dots) {
  const int64_t wbytes = cols / 2, sper = cols / group;
  const int64_t full = cols / kCols, rem = cols % kCols;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const float* x[T];
  const uint8_t* p[R];
  // The row's last full step with masks when it ends the row (its shifted
  // loads would reach past it), outside the loop (fp4_f32_avx512.cpp says why).
  const int64_t plain = rem > 0 ? full : full - 1;
  auto full_step = [&](int64_t g, auto masked) __attribute__((always_inline)) {
    __m512 s[R];
    for (int r = 0; r < R; ++r) {
      p[r] = w0 + r * wbytes + 64 * g;
      const uint8_t* ahead = p[r] + kInt4Prefetch + (64 * g + kInt4Prefetch < wbytes ? 0 : (R - 1) * wbytes);
      _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      if constexpr (R == 1) _mm_prefetch(reinterpret_cast<const char*>(p[r] + kInt4PrefetchL2), _MM_HINT_T1);
      s[r] = step_scales(step_scale_bits<kG32>(s0 + r * sper, g, group, 4));
    }
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * g;
    step<R, T, decltype(masked)::value>(p, 64, s, x, acc);
  };
  for (int64_t g = 0; g < plain; ++g) full_step(g, Masked<false>{});
  if (plain < full) full_step(plain, Masked<true>{});
  if (rem > 0) {  // 32, 64 or 96 columns
    __m512 s[R];
    for (int r = 0; r < R; ++r) {
      p[r] = w0 + r * wbytes + 64 * full;
      s[r] = step_scales(step_scale_bits<kG32>(s0 + r * sper, full, group, int(rem / 32)));
    }
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * full;
    step<R, T, true>(p, rem / 2, s, x, acc);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) dots[r * T + t] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int T, bool kG32>
void int4_range(const RawWeights& w, int64_t r0, int64_t r1, const float* const* x, int64_t t0,
                const RowsOut& out) {
  constexpr int R = kRows<T>;
  const int64_t cols = w.cols, wbytes = cols / 2, sper = cols / w.group;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w.scales);
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    float dots[R * T];
    int4_rows<R, T, kG32>(w.data + r * wbytes, scales + r * sper, cols, w.group, x, dots);
    for (int i = 0; i < R; ++i) store_row<T>(out, r + i, t0, dots + i * T, 1.0f);
  }
  for (; r < r1; ++r) {
    float dots[T];
    int4_rows<1, T, kG32>(w.data + r * wbytes, scales + r * sper, cols, w.group, x, dots);
    store_row<T>(out, r, t0, dots, 1.0f);
  }
}

template <int T>
void int4_range_at(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                   const RowsOut& out) {
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(acts[t]);
  if (w.group == 32) int4_range<T, true>(w, r0, r1, x, t0, out);
  else int4_range<T, false>(w, r0, r1, x, t0, out);
}

}  // namespace

void int4_f32_prepare_avx512(const float* x, int64_t cols, float* out) {
  const int64_t steps = round_up(cols, kCols) / kCols;
  const __m512i lane8 = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  for (int64_t g = 0; g < steps; ++g) {
    const int64_t base = g * kCols;
    const __m512i left = _mm512_set1_epi32(int32_t(cols - base < kCols ? cols - base : kCols));
    for (int k = 0; k < 8; ++k) {
      const __m512i idx = _mm512_add_epi32(lane8, _mm512_set1_epi32(k));
      const __mmask16 m = _mm512_cmplt_epi32_mask(idx, left);
      _mm512_store_ps(out + base + 16 * k, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, x + base, 4));
    }
  }
}

void int4_f32_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                          int64_t t0, const RowsOut& out) {
  switch (n_tok) {
    case 1: int4_range_at<1>(w, r0, r1, acts, t0, out); break;
    case 2: int4_range_at<2>(w, r0, r1, acts, t0, out); break;
    case 3: int4_range_at<3>(w, r0, r1, acts, t0, out); break;
    default: int4_range_at<4>(w, r0, r1, acts, t0, out); break;
  }
}

}  // namespace nibble::x86
