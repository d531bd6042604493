#include "format/int4.h"

#include <cmath>

#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

void check_lengths(int64_t n, int64_t group) {
  if (group <= 0 || group % 8 != 0) fail("int4: group size ", group, " is not a positive multiple of 8");
  if (n % group != 0) fail("int4: row length ", n, " is not a multiple of the group size ", group);
}

}  // namespace

void int4_dequantize_row(const uint8_t* packed, const uint16_t* scales, int64_t n, int64_t group, float* y) {
  check_lengths(n, group);
  for (int64_t g = 0; g < n / group; ++g) {
    const float s = bf16_decode(scales[g]);
    for (int64_t k = g * group; k < (g + 1) * group; ++k) {
      const int code = (packed[k / 2] >> (4 * (k % 2))) & 0xF;
      y[k] = float(code - 8) * s;
    }
  }
}

void int4_quantize_row(const float* x, int64_t n, int64_t group, uint8_t* packed, uint16_t* scales) {
  check_lengths(n, group);
  for (int64_t k = 0; k < n / 2; ++k) packed[k] = 0;
  for (int64_t g = 0; g < n / group; ++g) {
    float amax = 0;
    for (int64_t k = g * group; k < (g + 1) * group; ++k) {
      if (!std::isfinite(x[k])) fail("int4: element ", k, " is not finite (", x[k], ")");
      amax = std::max(amax, std::fabs(x[k]));
    }
    scales[g] = bf16_encode(amax > 0 ? amax / 7.0f : 1.0f);
    const float s = bf16_decode(scales[g]);
    for (int64_t k = g * group; k < (g + 1) * group; ++k) {
      const float q = std::nearbyint(x[k] / s);  // the default rounding mode: to nearest, ties to even
      const int code = int(std::fmin(7.0f, std::fmax(-8.0f, q))) + 8;
      packed[k / 2] = uint8_t(packed[k / 2] | (code << (4 * (k % 2))));
    }
  }
}

}  // namespace nibble
