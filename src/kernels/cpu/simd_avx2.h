// Helpers shared by the AVX2 kernel files (linear_avx2.cpp, fp4_f32_avx2.cpp,
// fp4_int16_avx2.cpp, ...). Include from *_avx2.cpp files only: everything here is
// compiled with the AVX2 flags, and sits in an anonymous namespace so that
// no copy of it can be linked into baseline code (see kernels_x86.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"

namespace nibble::x86 {
namespace {

constexpr int64_t kPad = 128;        // every layout pads cols to this
constexpr int64_t kPrefetch = 1024;  // bytes ahead of the weight stream (see simd_avx512.h)

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Tokens in the next pass over a row tile, of `left` still to do, at most
// `most` per pass: the passes a batch needs (ceil(left / most)) made as
// even as they go, e.g. 9 = 3 + 3 + 3 and 5 = 3 + 2 rather than 4 + 4 + 1
// and 4 + 1: a one-token pass costs nearly what a full one does (its
// decode is shared by one token only). Every (row, token) pair runs the
// same operations whatever its pass (batch invariance), so only the speed
// depends on this.
inline int64_t pass_tokens(int64_t left, int64_t most) {
  const int64_t passes = (left + most - 1) / most;
  return (left + passes - 1) / passes;
}

// A pass's token count as a type, for the template that runs it.
template <int T>
struct PassTokens {
  static constexpr int value = T;
};

// Runs n tokens in passes of up to 6 (pass_tokens), in token order (RowsOut
// adds a repeated row's tokens in that order): pass(t, PassTokens<T>{}) per
// pass, t its first token. The kernels with register passes of 1..6 tokens
// share this switch from a run-time count to their template instances.
template <class Pass>
inline void run_passes_of_6(int64_t n, Pass&& pass) {
  for (int64_t t = 0, nt = 0; t < n; t += nt) {
    nt = pass_tokens(n - t, 6);
    switch (nt) {
      case 1: pass(t, PassTokens<1>{}); break;
      case 2: pass(t, PassTokens<2>{}); break;
      case 3: pass(t, PassTokens<3>{}); break;
      case 4: pass(t, PassTokens<4>{}); break;
      case 5: pass(t, PassTokens<5>{}); break;
      default: pass(t, PassTokens<6>{}); break;
    }
  }
}

// An f32 scale from a tensor that need not be 4-byte aligned.
inline float load_f32(const uint8_t* p) {
  float f;
  __builtin_memcpy(&f, p, 4);
  return f;
}

inline float bits_to_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Copies n <= 64 bytes into a zeroed 64-byte buffer (AVX2 has no masked
// byte loads; tails must not read past the row).
inline void copy_tail(const uint8_t* src, int64_t n, uint8_t* buf) {
  for (int i = 0; i < 64; ++i) buf[i] = 0;
  for (int64_t i = 0; i < n; ++i) buf[i] = src[i];
}

// MXFP4 scales of 64 weights (2 UE8M0 bytes in the low bytes of s) as 8
// dwords, dword j = the scale of block j / 4 (2^(e-127) is the float with
// exponent field e; see simd_avx512.h for codes 0 and 255). The 2 bytes
// broadcast to every word, then one in-lane byte shuffle puts byte b,
// zero-extended, into the dwords of 128-bit lane b.
inline __m256 mx_scales(__m128i s) {
  const __m256i pick = _mm256_setr_epi32(0x80808000, 0x80808000, 0x80808000, 0x80808000, 0x80808001, 0x80808001,
                                         0x80808001, 0x80808001);
  const __m256i e = _mm256_shuffle_epi8(_mm256_broadcastw_epi16(s), pick);
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

// NVFP4 scales of 64 weights (4 E4M3 bytes in the low dword of s) as 8
// dwords, dword J = the scale of block J / 2, times 2^-8: each byte
// doubled, sign-extended to 16 bits, (v << 7) & 0xBF80 is the f16 of
// value * 2^-8 (see linear_avx512.cpp).
inline __m256 nv_pair_scales(__m128i s) {
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i w = _mm_cvtepi8_epi16(_mm_shuffle_epi8(s, dup));
  const __m128i f = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(int16_t(0xBF80)));
  return _mm256_cvtph_ps(f);
}

// out[t][r] for T tokens (starting at t0) from their dot products, times
// `scale` (RowsOut semantics, kernels_x86.h). v is rounded to f32 before it
// is added: GCC contracts a * b + c into one FMA wherever it sees fit
// (-ffp-contract=fast is its default for C++), and it did so in some
// instantiations of T and not others, so a token's MoE output depended on
// the batch. The empty asm hides v's origin and so rules the FMA out.
template <int T>
inline void store_row(const RowsOut& out, int64_t r, int64_t t0, const float* dots, float scale) {
  for (int t = 0; t < T; ++t) {
    const int64_t yi = out.y_index ? out.y_index[t0 + t] : t0 + t;
    float* y = out.y + yi * out.ldy + r;
    float v = dots[t] * scale * (out.alpha ? out.alpha[t0 + t] : 1.0f);
    __asm__("" : "+x"(v));
    *y = out.accumulate ? *y + v : v;
  }
}

// ---- FP4 rows through an integer-activation kernel (int8, int16) -------------
//
// The int8 (linear_avx2.cpp) and int16 (fp4_int16_avx2.cpp) FP4 kernels
// walk rows the same way and differ only in one group's products:
// Kernel::step<T>(v, ws, acts, g, acc) adds group g (64 columns) of one row
// to T tokens' accumulators, v being its 32 code bytes and ws its scale
// vector (mx_scales / nv_pair_scales: dword J = MXFP4 block J / 4, NVFP4
// block J / 2).

// Groups [g0, g1) of one row against T tokens, continuing the accumulators
// in `state` (T vectors of 8 f32, loaded at the start and stored at the
// end: exact, so where a row's columns are split changes no result). g1 =
// the row's group count includes a partial last group (16, 32 or 48
// columns, through zero-padded copies). Prefetches one line per two groups
// at pf + 32 g and, where spf is set, one scale line per 64 scale bytes at
// spf.
template <class Kernel, int T, bool kNv>
void fp4_int_row_part(const uint8_t* wrow, const uint8_t* srow, int64_t cols, int64_t g0, int64_t g1,
                      const uint8_t* const* acts, const uint8_t* pf, const uint8_t* spf, float* state) {
  constexpr int64_t kScaleBytes = kNv ? 4 : 2;  // per group
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_load_ps(state + 8 * t);
  const int64_t full = cols / 64;
  const int64_t g_end = g1 < full ? g1 : full;
  for (int64_t g = g0; g < g_end; ++g) {
    if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + 32 * g), _MM_HINT_T0);
    if (spf != nullptr && (kScaleBytes * g) % 64 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(spf + kScaleBytes * g), _MM_HINT_T0);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + 32 * g));
    int32_t s = 0;
    __builtin_memcpy(&s, srow + kScaleBytes * g, kScaleBytes);
    const __m128i sv = _mm_cvtsi32_si128(s);
    Kernel::template step<T>(v, kNv ? nv_pair_scales(sv) : mx_scales(sv), acts, g, acc);
  }
  const int64_t rem = cols % 64;
  if (rem > 0 && g1 > full) {
    alignas(32) uint8_t wbuf[64], sbuf[64];
    copy_tail(wrow + 32 * full, rem / 2, wbuf);
    copy_tail(srow + kScaleBytes * full, kNv ? rem / 16 : rem / 32, sbuf);
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wbuf));
    const __m128i sv = _mm_load_si128(reinterpret_cast<const __m128i*>(sbuf));
    Kernel::template step<T>(v, kNv ? nv_pair_scales(sv) : mx_scales(sv), acts, full, acc);
  }
  for (int t = 0; t < T; ++t) _mm256_store_ps(state + 8 * t, acc[t]);
}

// Rows [r0, r1) x tokens [t0, t0 + T), results times `scale` (store_row).
// Up to 2 tokens stream whole rows, prefetching `row_prefetch` bytes ahead.
// From kIntBlockFrom tokens on, a whole-row pass read all T tokens' x for
// every row (int8: 2 bytes per element, 24-32 KB at 3-4 tokens and 4096
// columns, in a 32 KB L1 that the weights stream through too). So rows go
// in blocks of kIntBlockRows over chunks of kIntChunkCols columns, whose x
// stays in L1 while the block's rows pass over it, as in fp4_range
// (fp4_f32_avx2.cpp), and with its prefetches. Zen 3, int8, bench
// --resident, 2 MB of MXFP4, best of 4 interleaved rounds, GB/s at 3 / 4 /
// 8 tokens, whole rows -> blocks: 2048 columns 6.6 / 5.6 / 2.8 -> 8.1 / 6.2
// / 3.3; 4096: 6.6 / 5.0 / 2.5 -> 7.8 / 6.3 / 3.2; 16384: 5.2 / 4.1 / 2.0
// -> 6.2 / 4.9 / 2.5. At 2 tokens blocks were slower (4096 columns: 6.7-8.0
// against 11.4; int16 from 1 token: 10.4-10.5 against 11.6-12.0 at 1).
constexpr int64_t kIntChunkCols = 1024;
constexpr int64_t kIntBlockRows = 8;
constexpr int kIntBlockFrom = 3;

template <class Kernel, int T, bool kNv>
void fp4_int_range(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                   const RowsOut& out, float scale, int64_t row_prefetch) {
  const int64_t cols = w.cols, wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  const int64_t groups = (cols + 63) / 64;
  const int64_t chunk = T < kIntBlockFrom ? groups : kIntChunkCols / 64;
  const int64_t block = T < kIntBlockFrom ? 1 : kIntBlockRows;
  alignas(32) float state[kIntBlockRows * 8 * T];
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t nr = r1 - rb < block ? r1 - rb : block;
    for (int64_t i = 0; i < nr * 8 * T; ++i) state[i] = 0.0f;
    for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
      const int64_t g1 = g0 + chunk < groups ? g0 + chunk : groups;
      for (int64_t i = 0; i < nr; ++i) {
        const uint8_t* wrow = w.data + (rb + i) * wbytes;
        const uint8_t* srow = w.scales + (rb + i) * sbytes;
        // Whole rows: row_prefetch ahead in the row. Blocks: the same
        // columns of this row in the next block, weights and scales.
        const uint8_t* pf = block == 1 ? wrow + row_prefetch : wrow + block * wbytes;
        const uint8_t* spf = block == 1 ? nullptr : srow + block * sbytes;
        fp4_int_row_part<Kernel, T, kNv>(wrow, srow, cols, g0, g1, acts, pf, spf, state + i * 8 * T);
      }
    }
    for (int64_t i = 0; i < nr; ++i) {
      float dots[T];
      for (int t = 0; t < T; ++t) dots[t] = hsum(_mm256_load_ps(state + i * 8 * T + 8 * t));
      store_row<T>(out, rb + i, t0, dots, scale);
    }
  }
}

}  // namespace
}  // namespace nibble::x86
