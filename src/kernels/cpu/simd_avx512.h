// Helpers shared by the AVX-512 kernel files (linear_avx512.cpp,
// fp4_f32_avx512.cpp). Include from *_avx512.cpp files only: everything here
// is compiled with the AVX-512 flags, and sits in an anonymous namespace so
// that no copy of it can be linked into baseline code (see kernels_x86.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"

namespace nibble::x86 {
namespace {

#ifndef NIBBLE_PREFETCH
#define NIBBLE_PREFETCH 1024
#endif
// Bytes ahead of the weight stream that the kernels prefetch: the hardware
// prefetcher alone leaves too few lines in flight while the core is busy
// decoding (bench/RESULTS.md).
constexpr int64_t kPrefetch = NIBBLE_PREFETCH;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A compile-time flag and count for a generic lambda's argument (no
// <type_traits> here): Masked<true>{} selects a row's masked tail step,
// Count<2>{} a loop body's row count.
template <bool B>
struct Masked {
  static constexpr bool value = B;
};
template <int N>
struct Count {
  static constexpr int value = N;
};

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

// MXFP4 block scales of 128 weights (4 UE8M0 bytes, block b in byte b) as 16
// dwords, dword j = the scale of block j / 4: 2^(e-127) is the float with
// exponent field e. e = 0 (2^-127) becomes 0 and e = 255 (NaN) becomes
// infinity; both are far outside real weights' range. The 4 bytes arrive
// broadcast to every dword (a load-port broadcast); one in-lane byte shuffle
// puts byte b, zero-extended, into the dwords of 128-bit lane b.
inline __m512 mx_scales(int32_t s4) {
  const __m512i pick = _mm512_setr_epi32(0x80808000, 0x80808000, 0x80808000, 0x80808000, 0x80808001, 0x80808001,
                                         0x80808001, 0x80808001, 0x80808002, 0x80808002, 0x80808002, 0x80808002,
                                         0x80808003, 0x80808003, 0x80808003, 0x80808003);
  const __m512i e = _mm512_shuffle_epi8(_mm512_set1_epi32(s4), pick);
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

// E4M3 codes in the high byte of 16-bit lanes -> the f16 with the same bits
// shifted: sign stays at bit 15, |code| lands at bits 13..7. That f16 equals
// the E4M3 value times 2^-8 exactly, subnormals included (both formats'
// subnormals line up), so vcvtph2ps then gives exact f32s; callers fold the
// 2^8 into a scale. (The E4M3 NaN codes 0x7F/0xFF become 1.875 * 2^8.)
inline __m256i e4m3_hi_to_f16(__m256i hi_bytes) {
  return _mm256_and_si256(_mm256_srai_epi16(hi_bytes, 1), _mm256_set1_epi16(int16_t(0xBF80)));
}

// NVFP4 block scales of 128 weights (8 E4M3 bytes) as 16 dwords, dword j =
// the scale of block j / 2, times 2^-8 (see above).
inline __m512 nv_scales(__m128i s8) {
  // word i takes byte i/2 in its high half.
  const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 1, 0, 1, 0, 2, 0, 2, 0, 3, 0, 3, 0, 4, 0, 4, 0,
                                       5, 0, 5, 0, 6, 0, 6, 0, 7, 0, 7);
  __m256i w = _mm256_maskz_permutexvar_epi8(0xAAAAAAAAu, idx, _mm256_castsi128_si256(s8));
  return _mm512_cvtph_ps(e4m3_hi_to_f16(w));
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
