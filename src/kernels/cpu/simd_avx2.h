// Helpers shared by the AVX2 kernel files (linear_avx2.cpp,
// fp4_f32_avx2.cpp). Include from *_avx2.cpp files only: everything here is
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

}  // namespace
}  // namespace nibble::x86
