// INT4 weights (format/int4.h) against int8-quantized activations on
// AVX-512 VNNI: the opt-in lossy path of the `cpu_avx512_int8` backends
// (the default is int4_f32_avx512.cpp). x is rounded per block of 32 to
// q_x = RNE(x * 127 / amax), step d = amax / 127 (the FP4 int8 kernels'
// rule); everything after that is exact integer arithmetic up to one f32
// product and add per 8 columns.
//
// Decoding is free: vpdpbusd multiplies unsigned bytes by signed ones, and
// the stored code c = q + 8 is an unsigned nibble. The 64 bytes of a
// 128-column step hold, in dword j, columns 8j .. 8j+7: byte b's low nibble
// column 8j+2b, its high nibble 8j+2b+1. So with L = v & 0xF and H = (v >>
// 4) & 0xF,
//   d_j = corr_j + dpbusd(L, E)_j + dpbusd(H, O)_j = sum over 8 columns of q q_x,
// where E / O hold the activations of the even / odd columns in the same byte
// places and corr_j = -8 * (sum of the lane's 8 q_x) undoes the + 8. |d_j| <=
// 8 * 8 * 127, exact in int32 and in f32. Then acc = fma(f32(d), s_w s_x,
// acc) with the lane's BF16 weight scale and f32 activation scale (lane j
// lies in 32-column block j / 4, as in int4_f32_avx512.cpp).
//
// Summation order per (row, token), the same for every batch size (batch
// invariance): per step the integer d, then the one FMA; per row one
// _mm512_reduce_add_ps. Rows run one at a time; each decoded step serves
// all tokens of the pass (1..4).
//
// Activations (ActsClass::int8_int4), per 128 columns and token, 256 bytes:
//   [  0.. 63] E: dword j byte b = q_x[8j + 2b]      (int8)
//   [ 64..127] O: dword j byte b = q_x[8j + 2b + 1]  (int8)
//   [128..191] corr[16]: -8 * sum of lane j's 8 q_x  (int32)
//   [192..255] xs[16]: the step of lane j's block    (f32)
// zero past cols.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx512.h here (see
// kernels_x86.h).
// GCC 12 reports its own intrinsics' undefined-vector idiom (__Y) as
// uninitialized under -O3 (as in fp4_f32_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx512.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kCols = 128;       // columns per step
constexpr int64_t kStepBytes = 256;  // activation bytes per step and token

// Lane scales (int4_f32_avx512.cpp's step_scales): 128-bit lane b takes the
// BF16 bits of block b into the high half of its dwords.
inline __m512 step_scales(uint64_t four) {
  const __m512i pick = _mm512_setr_epi32(0x01008080, 0x01008080, 0x01008080, 0x01008080, 0x03028080, 0x03028080,
                                         0x03028080, 0x03028080, 0x05048080, 0x05048080, 0x05048080, 0x05048080,
                                         0x07068080, 0x07068080, 0x07068080, 0x07068080);
  return _mm512_castsi512_ps(_mm512_shuffle_epi8(_mm512_set1_epi64(int64_t(four)), pick));
}

inline uint64_t step_scale_bits(const uint16_t* srow, int64_t g, int64_t group, int blocks) {
  uint64_t v = 0;
  for (int b = 0; b < blocks; ++b) v |= uint64_t(srow[(kCols * g + 32 * b) / group]) << (16 * b);
  return v;
}

// Round to nearest, ties to even (the default MXCSR mode).
inline int32_t rne(float v) { return _mm_cvtss_si32(_mm_set_ss(v)); }

template <int T>
void int4_int8_row(const uint8_t* wrow, const uint16_t* srow, int64_t cols, int64_t group,
                   const uint8_t* const* acts, float* dots) {
  const int64_t steps = (cols + kCols - 1) / kCols;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < steps; ++g) {
    const int64_t left = cols - kCols * g;
    __m512i v;
    uint64_t sbits;
    if (left >= kCols) {
      _mm_prefetch(reinterpret_cast<const char*>(wrow + 64 * g + 2 * kPrefetch), _MM_HINT_T0);
      v = _mm512_loadu_si512(wrow + 64 * g);
      if (group == 32) __builtin_memcpy(&sbits, srow + 4 * g, 8);
      else sbits = step_scale_bits(srow, g, group, 4);
    } else {  // 32, 64 or 96 columns: missing codes read 0 and meet zero activations
      v = _mm512_maskz_loadu_epi8((__mmask64(1) << (left / 2)) - 1, wrow + 64 * g);
      sbits = step_scale_bits(srow, g, group, int(left / 32));
    }
    const __m512i L = _mm512_and_si512(v, m4), H = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    const __m512 ws = step_scales(sbits);
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = acts[t] + kStepBytes * g;
      __m512i d = _mm512_load_si512(a + 128);
      d = _mm512_dpbusd_epi32(d, L, _mm512_load_si512(a));
      d = _mm512_dpbusd_epi32(d, H, _mm512_load_si512(a + 64));
      const __m512 s = _mm512_mul_ps(ws, _mm512_load_ps(reinterpret_cast<const float*>(a + 192)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) dots[t] = _mm512_reduce_add_ps(acc[t]);
}

template <int T>
void int4_int8_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                     const RowsOut& out) {
  const int64_t wbytes = w.cols / 2, sper = w.cols / w.group;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w.scales);
  for (int64_t r = r0; r < r1; ++r) {
    float dots[T];
    int4_int8_row<T>(w.data + r * wbytes, scales + r * sper, w.cols, w.group, acts, dots);
    store_row<T>(out, r, t0, dots, 1.0f);
  }
}

}  // namespace

int64_t int4_int8_stride_avx512(int64_t cols) { return round_up(cols, kCols) / kCols * kStepBytes; }

void int4_int8_prepare_avx512(const float* x, int64_t cols, uint8_t* out) {
  const int64_t steps = round_up(cols, kCols) / kCols;
  for (int64_t g = 0; g < steps; ++g) {
    uint8_t* o = out + kStepBytes * g;
    int8_t* E = reinterpret_cast<int8_t*>(o);
    int8_t* O = reinterpret_cast<int8_t*>(o + 64);
    int32_t* corr = reinterpret_cast<int32_t*>(o + 128);
    float* xs = reinterpret_cast<float*>(o + 192);
    for (int blk = 0; blk < 4; ++blk) {
      const int64_t base = kCols * g + 32 * blk;
      const int64_t len = cols - base < 32 ? (cols - base > 0 ? cols - base : 0) : 32;
      float amax = 0.0f;
      for (int64_t k = 0; k < len; ++k) {
        const float a = x[base + k] < 0 ? -x[base + k] : x[base + k];
        amax = a > amax ? a : amax;
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int lane = 4 * blk; lane < 4 * blk + 4; ++lane) {
        int32_t sum = 0;
        for (int k = 0; k < 8; ++k) {
          const int64_t c = kCols * g + 8 * lane + k;
          const int32_t q = c < cols ? rne(x[c] * inv) : 0;
          sum += q;
          (k % 2 ? O : E)[4 * lane + k / 2] = int8_t(q);
        }
        corr[lane] = -8 * sum;
        xs[lane] = amax / 127.0f;
      }
    }
  }
}

void int4_int8_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                           int64_t t0, const RowsOut& out) {
  switch (n_tok) {
    case 1: int4_int8_range<1>(w, r0, r1, acts, t0, out); break;
    case 2: int4_int8_range<2>(w, r0, r1, acts, t0, out); break;
    case 3: int4_int8_range<3>(w, r0, r1, acts, t0, out); break;
    default: int4_int8_range<4>(w, r0, r1, acts, t0, out); break;
  }
}

}  // namespace nibble::x86
