// INT4 weights (format/int4.h) against int8-quantized activations on AVX2:
// the opt-in lossy path of the `cpu_avx2_int8` backends (the default is
// int4_f32_avx2.cpp). The scheme of int4_int8_avx512.cpp (read that first)
// with vpmaddubsw / vpmaddwd for vpdpbusd, per 64 columns: dword j of the 32
// code bytes holds columns 8j .. 8j+7 (lane j in 32-column block j / 4), so
//   d_j = corr_j + madd(maddubs(L, E) + maddubs(H, O), 1)_j.
// No 16-bit step saturates: a maddubs pair is at most 2 * 15 * 127 = 3810 in
// magnitude, the sum of the two 7620.
//
// Activations (ActsClass::int8_int4), per 64 columns and token, 128 bytes:
//   [ 0.. 31] E: dword j byte b = q_x[8j + 2b]      (int8)
//   [32.. 63] O: dword j byte b = q_x[8j + 2b + 1]  (int8)
//   [64.. 95] corr[8]: -8 * sum of lane j's 8 q_x   (int32)
//   [96..127] xs[8]: the step of lane j's block     (f32)
// zero past cols, padded to 128 columns.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx2.h here (see
// kernels_x86.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx2.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kCols = 64;        // columns per step
constexpr int64_t kStepBytes = 128;  // activation bytes per step and token

// int4_f32_avx2.cpp's step_scales: the two BF16 scales of the step's blocks
// (lo = block 2g, hi = block 2g+1) into the high halves of lanes 0-3 / 4-7.
inline __m256 step_scales(uint32_t two) {
  const __m256i pick = _mm256_setr_epi32(0x01008080, 0x01008080, 0x01008080, 0x01008080, 0x03028080, 0x03028080,
                                         0x03028080, 0x03028080);
  return _mm256_castsi256_ps(_mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(two)), pick));
}

inline int32_t rne(float v) { return _mm_cvtss_si32(_mm_set_ss(v)); }

template <int T>
void int4_int8_row(const uint8_t* wrow, const uint16_t* srow, int64_t cols, int64_t group,
                   const uint8_t* const* acts, float* dots) {
  const int64_t steps = (cols + kCols - 1) / kCols;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < steps; ++g) {
    __m256i v;
    uint32_t two;
    if (cols - kCols * g >= kCols) {
      if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(wrow + 32 * g + kPrefetch), _MM_HINT_T0);
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + 32 * g));
      // Group 32 (Kimi K2's): the two scales are adjacent; an integer
      // division per step would cost more than the step (8.8 against
      // 12.6 GB/s exact at one token, --resident).
      if (group == 32) __builtin_memcpy(&two, srow + 2 * g, 4);
      else two = uint32_t(srow[(kCols * g) / group]) | uint32_t(srow[(kCols * g + 32) / group]) << 16;
    } else {  // 32 columns, through a zero-padded copy (missing codes meet zero activations)
      alignas(32) uint8_t buf[64];
      copy_tail(wrow + 32 * g, 16, buf);
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
      two = srow[(kCols * g) / group];
    }
    const __m256i L = _mm256_and_si256(v, m4), H = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    const __m256 ws = step_scales(two);
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = acts[t] + kStepBytes * g;
      const __m256i p = _mm256_add_epi16(
          _mm256_maddubs_epi16(L, _mm256_load_si256(reinterpret_cast<const __m256i*>(a))),
          _mm256_maddubs_epi16(H, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 32))));
      const __m256i d =
          _mm256_add_epi32(_mm256_madd_epi16(p, ones), _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 64)));
      const __m256 s = _mm256_mul_ps(ws, _mm256_load_ps(reinterpret_cast<const float*>(a + 96)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) dots[t] = hsum(acc[t]);
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

int64_t int4_int8_stride_avx2(int64_t cols) { return round_up(cols, kPad) / kCols * kStepBytes; }

void int4_int8_prepare_avx2(const float* x, int64_t cols, uint8_t* out) {
  const int64_t steps = round_up(cols, kPad) / kCols;
  for (int64_t g = 0; g < steps; ++g) {
    uint8_t* o = out + kStepBytes * g;
    int8_t* E = reinterpret_cast<int8_t*>(o);
    int8_t* O = reinterpret_cast<int8_t*>(o + 32);
    int32_t* corr = reinterpret_cast<int32_t*>(o + 64);
    float* xs = reinterpret_cast<float*>(o + 96);
    for (int blk = 0; blk < 2; ++blk) {
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

void int4_int8_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                         int64_t t0, const RowsOut& out) {
  switch (n_tok) {
    case 1: int4_int8_range<1>(w, r0, r1, acts, t0, out); break;
    case 2: int4_int8_range<2>(w, r0, r1, acts, t0, out); break;
    case 3: int4_int8_range<3>(w, r0, r1, acts, t0, out); break;
    default: int4_int8_range<4>(w, r0, r1, acts, t0, out); break;
  }
}

}  // namespace nibble::x86
