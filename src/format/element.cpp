#include "format/element.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace nibble {

const float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

namespace {

void check_not_nan(float x, const char* type) {
  if (std::isnan(x)) fail_encode_nan(type);
}

double e4m3_magnitude(int code) {  // code 0..0x7F
  int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0) return std::ldexp(double(m), -9);
  return std::ldexp(1.0 + m / 8.0, e - 7);
}

double e5m2_magnitude(int code) {  // code 0..0x7F, finite part only
  int e = (code >> 2) & 0x1F, m = code & 3;
  if (e == 0) return std::ldexp(double(m), -16);
  return std::ldexp(1.0 + m / 4.0, e - 15);
}

// Decoding is a lookup in tables built once from the definitions above (the
// FP8 dequantizers decode one code per weight).
struct Tables {
  std::array<float, 256> e4m3;   // every code, 0x7F / 0xFF NaN
  std::array<float, 256> e5m2;   // every code, inf and NaN included
  std::array<double, 255> ue8m0; // codes 0..254 (0xFF is NaN)
  Tables() {
    for (int c = 0; c < 256; ++c) {
      int mag = c & 0x7F;
      float v = mag == 0x7F ? NAN : float(e4m3_magnitude(mag));
      e4m3[c] = (c & 0x80) ? -v : v;
      v = mag == 0x7C ? INFINITY : mag > 0x7C ? NAN : float(e5m2_magnitude(mag));
      e5m2[c] = (c & 0x80) ? -v : v;
    }
    for (int i = 0; i < 255; ++i) ue8m0[i] = std::ldexp(1.0, i - 127);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// Saturating RNE into a small float with `mbits` mantissa bits, exponent
// bias `bias` and largest finite magnitude code `max_code`, for a >= 0 (not
// NaN). The binade of a (exponent E, clamped up to the subnormal binade
// 1 - bias) has spacing 2^(E - mbits); q = rint(a / spacing) rounds to
// nearest even in one step (a / spacing is exact: a power-of-two scaling).
// Then code = ((E + bias - 1) << mbits) + q: for a normal binade q is in
// [2^mbits, 2^(mbits+1)] and the leading 1 bumps the exponent field to
// E + bias; q = 2^(mbits+1) carries into the next binade by itself; in the
// subnormal binade the code is just q. Codes past max_code saturate.
uint8_t encode_small_float(float a, int mbits, int bias, int max_code, float max_value) {
  if (a >= max_value) return uint8_t(max_code);  // also +inf
  uint32_t u;
  std::memcpy(&u, &a, 4);
  // f32 subnormals get E = -127, clamped to the subnormal binade: they are
  // far below half the smallest FP8 subnormal and round to 0.
  int E = std::max(int(u >> 23) - 127, 1 - bias);
  int q = int(std::nearbyint(std::ldexp(a, mbits - E)));  // default mode: ties to even
  return uint8_t(std::min(((E + bias - 1) << mbits) + q, max_code));
}

}  // namespace

void fail_encode_nan(const char* type) { fail("cannot encode NaN as ", type); }

float e4m3_decode(uint8_t code) { return tables().e4m3[code]; }

uint8_t e4m3_encode(float x) {
  check_not_nan(x, "E4M3");
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  return sign | encode_small_float(std::fabs(x), 3, 7, 0x7E, 448.0f);
}

float e5m2_decode(uint8_t code) { return tables().e5m2[code]; }

uint8_t e5m2_encode(float x) {
  check_not_nan(x, "E5M2");
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  return sign | encode_small_float(std::fabs(x), 2, 15, 0x7B, 57344.0f);
}

float ue8m0_decode(uint8_t code) {
  if (code == 0xFF) return NAN;
  return float(tables().ue8m0[code]);
}

uint8_t ue8m0_encode(float x) {
  check_not_nan(x, "UE8M0");
  if (!(x > 0)) fail("cannot encode ", x, " as UE8M0: the type has no zero and no sign");
  // Below 2^-127 everything rounds up to the smallest code (saturation).
  if (double(x) <= tables().ue8m0[0]) return 0;
  // A type without mantissa bits has no "even" neighbour, so ties-to-even
  // does not say where 1.5 * 2^k goes. ml_dtypes and torch (float8_e8m0fnu)
  // both send it up to 2^(k+1); we do the same so checkpoints written by
  // either agree with ours. Nearest in linear distance otherwise.
  const auto& t = tables().ue8m0;
  if (double(x) >= t[254]) return 254;  // saturate (2^127 is the largest code)
  int lo = 0, hi = 254;                 // t[lo] <= x < t[hi]
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (t[mid] <= double(x)) lo = mid; else hi = mid;
  }
  return uint8_t(double(x) - t[lo] < t[hi] - double(x) ? lo : hi);
}

uint16_t bf16_encode(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  // NaN becomes the canonical quiet NaN with the input's sign, the payload
  // dropped (what ml_dtypes does; truncating could turn a NaN whose payload
  // lives in the low bits into infinity).
  if (std::isnan(x)) return uint16_t(((u >> 16) & 0x8000) | 0x7FC0);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

}  // namespace nibble
