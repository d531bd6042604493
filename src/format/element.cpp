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
  std::array<double, 8> e2m1;
  std::array<double, 0x7F> e4m3;  // codes 0..0x7E (0x7F is NaN)
  std::array<double, 0x7C> e5m2;  // codes 0..0x7B (0x7C is inf)
  std::array<double, 255> ue8m0;  // codes 0..254
  Tables() {
    for (int i = 0; i < 8; ++i) e2m1[i] = kE2M1Values[i];
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
  uint8_t sign = std::signbit(x) ? 0x8 : 0;
  return sign | encode_nearest(std::fabs(double(x)), tables().e2m1.data(), 8);
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
  return encode_nearest(double(x), tables().ue8m0.data(), 255);
}

uint16_t bf16_encode(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40);  // keep it a quiet NaN
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

}  // namespace nibble
