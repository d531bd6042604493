// FP4 (MXFP4 / NVFP4) weights against int16 activations on AVX2: the
// opt-in path of the `cpu_avx2_int16` backends. x is rounded to int16 per
// block of 32 (step amax/32767, 258 times finer than the int8 path's
// amax/127), the products are integer dot products (vpmaddwd), and
// only the rounding of x, one int32 -> f32 conversion per group and the f32
// accumulation lose bits.
//
// Why: the exact kernel (fp4_f32_avx2.cpp) spends 19 ops decoding 64 codes
// to f32 and 10 FMAs per token on them; at one token it is compute-bound
// on Zen 3 (bench/results/2206_*). Here 64 codes decode in 9 ops to 4
// vectors of int16 and each token takes 4 vpmaddwd, 3 adds, a conversion, a
// multiply and an FMA: 1.4-1.6x the exact kernel at 1-2 tokens
// (bench/results/0745_avx2_int16_fp4.txt). Its logits stay within ~1e-4 of
// the exact ones, not the 1e-5 a default must meet, so it is opt-in.
//
// Decoding. vpshufb maps each code to the int8 2w (E2M1 doubled: 0, ±1,
// ±2, ±3, ±4, ±6, ±8, ±12). Per 32 bytes of codes, split into low nibbles L
// (byte j = code 2j) and high nibbles H (code 2j + 1), each looked up, the
// words 256 * 2w come from two 16-bit ops per vector, with no sign
// extension: the byte becomes a word's high byte,
//   W0 = L << 8 (even bytes)   W1 = L & 0xFF00 (odd bytes)
//   W2 = H << 8                W3 = H & 0xFF00
// so word m of 128-bit lane l (p = 8l + m) of Wk holds code
// 32l + 4m + {0, 2, 1, 3}[k], and the int16 x of the int16_fp4 layout sits
// in the same places. vpmaddwd sums word pairs, so dword J of the four
// products' sum covers codes 8J .. 8J + 7 (J < 4) and 8J + 0..7 (lane 1
// likewise): NVFP4 block J / 2, MXFP4 block J / 4 - the dword layouts of
// nv_pair_scales and mx_scales (simd_avx2.h).
//
// Range: |256 * 2w| <= 3072 and |q| <= 32767, so a dword's 8 products sum
// to at most 8 * 3072 * 32767 < 2^30: no overflow. The sum is exact; its
// conversion to f32 rounds (relative 2^-24).
//
// int16_fp4 layout per group of 64 columns and token (kGroupBytes):
//   [  0..127] q: 4 vectors of 16 int16, vector k word p = 8l + m the
//              column 32l + 4m + {0, 2, 1, 3}[k] (zero past cols)
//   [128..159] xs: 8 f32, dword J = the step of x-block J / 4 (amax/32767)
// padded to 128 columns as every layout.
//
// Batch invariance: every (row, token) pair runs the same operations in the
// same order whatever T, the pass and the row block; accumulators wait in
// memory exactly between column chunks.
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx2.h here (see
// kernels_x86.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx2.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kGroup = 64;        // columns per group: 32 bytes of codes
constexpr int64_t kGroupBytes = 160;  // per token and group, see above
constexpr float kQMax = 32767.0f;

// Column of word p of vector k within a group (see the layout above).
inline int64_t word_column(int k, int p) {
  constexpr int kOff[4] = {0, 2, 1, 3};
  return 32 * (p / 8) + 4 * (p % 8) + kOff[k];
}

// The int16 kernel of fp4_int_range (simd_avx2.h): one group of one row
// against T tokens, v its 32 code bytes, ws its scale vector,
// acts[t] + g * kGroupBytes token t's group.
struct Int16Fp4 {
  template <int T>
  static void step(__m256i v, __m256 ws, const uint8_t* const* acts, int64_t g, __m256* acc) {
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i high = _mm256_set1_epi16(int16_t(0xFF00));
    const __m256i L = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
    const __m256i H = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    const __m256i w0 = _mm256_slli_epi16(L, 8), w1 = _mm256_and_si256(L, high);
    const __m256i w2 = _mm256_slli_epi16(H, 8), w3 = _mm256_and_si256(H, high);
    for (int t = 0; t < T; ++t) {
      const __m256i* a = reinterpret_cast<const __m256i*>(acts[t] + g * kGroupBytes);
      const __m256i d01 = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_load_si256(a)),
                                           _mm256_madd_epi16(w1, _mm256_load_si256(a + 1)));
      const __m256i d23 = _mm256_add_epi32(_mm256_madd_epi16(w2, _mm256_load_si256(a + 2)),
                                           _mm256_madd_epi16(w3, _mm256_load_si256(a + 3)));
      const __m256i d = _mm256_add_epi32(d01, d23);
      const __m256 xs = _mm256_load_ps(reinterpret_cast<const float*>(a + 4));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(ws, xs), acc[t]);
    }
  }
};

// Rows [r0, r1) x tokens [t0, t0 + T), T <= 6, on fp4_int_range's row
// blocks and column chunks (from 3 tokens: the chunk's x, T x 2.5 KB, stays
// in L1), whole rows prefetching 2 KB ahead as fp4_range does.
template <int T>
void range_at(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
              const RowsOut& out) {
  // The table holds 2w, the words 256 times that; nv_pair_scales' 2^-8, s_g.
  if (w.kind == WeightKind::nvfp4)
    fp4_int_range<Int16Fp4, T, true>(w, r0, r1, acts, t0, out, w.global_scale / 2.0f, 2 * kPrefetch);
  else
    fp4_int_range<Int16Fp4, T, false>(w, r0, r1, acts, t0, out, 1.0f / 512.0f, 2 * kPrefetch);
}

}  // namespace

int64_t fp4_int16_stride_avx2(int64_t cols) { return round_up(cols, kPad) / kGroup * kGroupBytes; }

void fp4_int16_prepare_avx2(const float* x, int64_t cols, uint8_t* out) {
  const int64_t groups = round_up(cols, kPad) / kGroup;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* grp = out + g * kGroupBytes;
    int16_t* q = reinterpret_cast<int16_t*>(grp);
    float* xs = reinterpret_cast<float*>(grp + 128);
    int16_t qc[kGroup];  // q in column order
    for (int b = 0; b < 2; ++b) {
      const int64_t base = g * kGroup + 32 * b;
      const int64_t len = cols - base < 32 ? (cols - base > 0 ? cols - base : 0) : 32;
      float amax = 0.0f;
      bool finite = true;
      for (int64_t i = 0; i < len; ++i) {
        const float a = __builtin_fabsf(x[base + i]);
        finite = finite && a <= 3.4028234663852886e38f;  // false for inf and NaN
        amax = a > amax ? a : amax;
      }
      // As quantize_int8_token: q = round-half-even(x * (32767 / amax)),
      // step amax / 32767. A block with inf or NaN gets step NaN, so its
      // outputs are NaN as the exact kernels' would be (not inf: the
      // kernel multiplies the step in); a block so small that 32767 / amax
      // overflows counts as zero (its products are below 2^-110).
      const float inv = amax > 0.0f ? kQMax / amax : 0.0f;
      const bool zero = !finite || !(inv <= 3.4028234663852886e38f);
      const float step = !finite ? __builtin_nanf("") : zero ? 0.0f : amax / kQMax;
      for (int j = 0; j < 4; ++j) xs[4 * b + j] = step;
      for (int64_t i = 0; i < 32; ++i)
        qc[32 * b + i] = i < len && !zero ? int16_t(__builtin_nearbyintf(x[base + i] * inv)) : int16_t(0);
    }
    for (int k = 0; k < 4; ++k)
      for (int p = 0; p < 16; ++p) q[16 * k + p] = qc[word_column(k, p)];
  }
}

void fp4_int16_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                         int64_t t0, const RowsOut& out) {
  // Passes of up to 6 tokens, in token order (RowsOut): as against passes
  // of up to 4, 5 / 6 / 12 tokens +15-19% / +9-12% / +5-8% (bench
  // --resident 512 x 4096, Zen 3; bench/results/0745_avx2_int16_fp4.txt).
  // linear_rows_avx2 hands over up to 64 tokens, in row tiles.
  run_passes_of_6(n_tok, [&](int64_t t, auto tokens) {
    range_at<decltype(tokens)::value>(w, r0, r1, acts + t, t0 + t, out);
  });
}

}  // namespace nibble::x86
