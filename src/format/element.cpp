#include "format/element.h"

#include <array>
#include <cmath>

#include "util/error.h"

namespace nibble {

const float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

namespace {

// For the formats here code order equals value order among the non-negative
// finite codes, so encoding is a search in a sorted table: find the nearest
// value, break an exact tie towards the even code (the code whose last
// mantissa bit, i.e. lowest bit, is 0), clamp past the end. Exact by
// construction, with no bit fiddling to get wrong.
uint8_t encode_nearest(double a, const double* values, int n) {
  if (a >= values[n - 1]) return uint8_t(n - 1);  // saturate
  int lo = 0, hi = n - 1;                          // values[lo] <= a < values[hi]
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (values[mid] <= a) lo = mid; else hi = mid;
  }
  double dlo = a - values[lo], dhi = values[hi] - a;
  if (dlo < dhi) return uint8_t(lo);
  if (dhi < dlo) return uint8_t(hi);
  return uint8_t((lo % 2 == 0) ? lo : hi);
}

void check_not_nan(float x, const char* type) {
  if (std::isnan(x)) fail("cannot encode NaN as ", type);
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

struct Tables {
  std::array<double, 0x7F> e4m3;  // codes 0..0x7E (0x7F is NaN)
  std::array<double, 0x7C> e5m2;  // codes 0..0x7B (0x7C is inf)
  std::array<double, 255> ue8m0;  // codes 0..254
  Tables() {
    for (int i = 0; i < 0x7F; ++i) e4m3[i] = e4m3_magnitude(i);
    for (int i = 0; i < 0x7C; ++i) e5m2[i] = e5m2_magnitude(i);
    for (int i = 0; i < 255; ++i) ue8m0[i] = std::ldexp(1.0, i - 127);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint8_t e2m1_encode(float x) {
  check_not_nan(x, "E2M1");
  // The block quantizers call this once per weight, so E2M1 skips the table
  // search: the code of |x| is the number of rounding boundaries at or below
  // it. Boundaries are the midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5; at a
  // midpoint the comparison is > when the lower neighbour has the even code
  // (0, 2, 4, 6 -> stay) and >= when the upper one has it (move up), which
  // is ties-to-even. Everything above 5 lands on code 7 (6.0): saturation.
  float a = std::fabs(x);
  uint8_t code = uint8_t((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                         (a >= 3.5f) + (a > 5.0f));
  return uint8_t((std::signbit(x) ? 0x8 : 0) | code);
}

float e4m3_decode(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return NAN;
  float v = float(e4m3_magnitude(code & 0x7F));
  return (code & 0x80) ? -v : v;
}

uint8_t e4m3_encode(float x) {
  check_not_nan(x, "E4M3");
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  return sign | encode_nearest(std::fabs(double(x)), tables().e4m3.data(), 0x7F);
}

float e5m2_decode(uint8_t code) {
  int mag = code & 0x7F;
  float v;
  if (mag == 0x7C) v = INFINITY;
  else if (mag > 0x7C) v = NAN;
  else v = float(e5m2_magnitude(mag));
  return (code & 0x80) ? -v : v;
}

uint8_t e5m2_encode(float x) {
  check_not_nan(x, "E5M2");
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  return sign | encode_nearest(std::fabs(double(x)), tables().e5m2.data(), 0x7C);
}

float ue8m0_decode(uint8_t code) {
  if (code == 0xFF) return NAN;
  return float(std::ldexp(1.0, int(code) - 127));
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
