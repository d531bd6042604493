// Element codecs: the narrow number types of formats.md, one byte (or
// nibble) at a time. Encoders round to nearest, ties to even, and saturate to
// the largest finite value (PTX cvt.rn.satfinite); a NaN input is a caller
// error and throws nibble::Error. These are the exact reference every kernel
// is checked against (and what `nibble convert` runs per weight): each one is
// a direct statement of the rounding rule, checked against ml_dtypes over
// every code and >100k values in tests/format.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace nibble {

// Throws nibble::Error "cannot encode NaN as <type>" (kept out of line so
// the inline encoders stay small).
[[noreturn]] void fail_encode_nan(const char* type);

// E2M1 (FP4): s.ee.m, bias 1. Code in the low 4 bits; magnitudes by code
// 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; code 8 is -0.
extern const float kE2M1Values[16];
inline float e2m1_decode(uint8_t code) { return kE2M1Values[code & 0xF]; }
// Inline because the block quantizers call it once per weight. No table
// search: the code of |x| is the number of rounding boundaries below it.
// The boundaries are the midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5; at a
// midpoint the test is > where the lower neighbour has the even code (0, 2,
// 4, 6: stay) and >= where the upper one has it (move up) -- ties to even.
// Everything past 5 lands on code 7 (6.0): saturation.
inline uint8_t e2m1_encode(float x) {
  if (x != x) fail_encode_nan("E2M1");
  const float a = std::fabs(x);
  const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                   (a >= 3.5f) + (a > 5.0f);
  return uint8_t((std::signbit(x) ? 0x8 : 0) | code);
}

// E4M3 "fn": s.eeee.mmm, bias 7, max 448, 0x7F/0xFF NaN, no infinity.
float e4m3_decode(uint8_t code);
uint8_t e4m3_encode(float x);

// E5M2: s.eeeee.mm, bias 15, IEEE specials, max finite 57344.
float e5m2_decode(uint8_t code);
uint8_t e5m2_encode(float x);  // saturates: +-inf input gives +-57344

// UE8M0: 2^(e-127) for e in 0..254; 0xFF is NaN; no zero, no sign.
float ue8m0_decode(uint8_t code);
// Nearest power of two, saturating to [2^-127, 2^127]. A tie (1.5 * 2^k)
// goes up to 2^(k+1), as in ml_dtypes and torch: with no mantissa bits there
// is no even neighbour. Zero and negative inputs are errors: the type has
// neither.
uint8_t ue8m0_encode(float x);

// BF16: the upper half of an IEEE f32. Encoding rounds to nearest even like
// every framework does; it does not saturate (BF16 has f32's range and an
// infinity), and NaN becomes the quiet NaN 0x7FC0 carrying the input's sign.
inline float bf16_decode(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t bf16_encode(float x);

}  // namespace nibble
