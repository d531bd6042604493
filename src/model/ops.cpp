#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "format/block.h"

namespace nibble {

std::optional<WeightView> row_slice(const WeightView& w, int64_t r0, int64_t count) {
  if (r0 < 0 || count < 0 || r0 + count > w.rows) return std::nullopt;
  WeightView v = w;
  v.rows = count;
  const int64_t c = w.cols;
  switch (w.format) {
    case Format::mxfp4:
      v.data = w.data + r0 * (c / 2);
      v.scales = w.scales + r0 * (c / kMxfp4Block);
      return v;
    case Format::nvfp4:
      v.data = w.data + r0 * (c / 2);
      v.scales = w.scales + r0 * (c / kNvfp4Block);
      return v;
    case Format::int4:
      v.data = w.data + r0 * (c / 2);
      v.scales = w.scales + r0 * (c / w.group) * 2;  // BF16 scales
      return v;
    case Format::fp8_block128: {
      if (r0 % kFp8Tile) return std::nullopt;
      const int64_t scale_cols = (c + kFp8Tile - 1) / kFp8Tile;
      const int64_t scale_size = w.fp8_scale == Fp8ScaleType::f32 ? 4 : 1;
      v.data = w.data + r0 * c;
      v.scales = w.scales + (r0 / kFp8Tile) * scale_cols * scale_size;
      return v;
    }
    case Format::bf16:
      v.data = w.data + r0 * c * 2;
      return v;
    case Format::f32:
      v.data = w.data + r0 * c * 4;
      return v;
    case Format::int_index:
      break;
  }
  return std::nullopt;
}

void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * dim;
    float* yt = y + t * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xt[i]) * double(xt[i]);
    // HF: hidden * rsqrt(variance + eps), the variance in f32.
    const float r = 1.0f / std::sqrt(float(ss / double(dim)) + float(eps));
    if (weight) {
      for (int64_t i = 0; i < dim; ++i) yt[i] = weight[i] * (xt[i] * r);
    } else {
      for (int64_t i = 0; i < dim; ++i) yt[i] = xt[i] * r;
    }
  }
}

void softmax_inplace(float* v, int64_t n) {
  if (n <= 0) return;
  float m = *std::max_element(v, v + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - m));
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace nibble
