#include "model/deepseek_v4_rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace nibble {

namespace {

// YaRN: the (fractional) dimension index whose wavelength makes
// `num_rotations` turns over the original context.
double correction_dim(double num_rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (num_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable::RopeTable(const RopeConfig& cfg, int64_t rope_dim)
    : rope_dim_(rope_dim), attention_factor_(float(cfg.attention_factor)) {
  const int64_t half = rope_dim / 2;
  inv_freq_.resize(size_t(half));
  // pos_freqs = base ** (arange(0, dim, 2) / dim), all in f32 as torch does.
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = float(2 * i) / float(rope_dim);
    pos_freqs[size_t(i)] = float(std::pow(cfg.theta, double(e)));
  }
  if (!cfg.yarn) {
    for (int64_t i = 0; i < half; ++i) inv_freq_[size_t(i)] = 1.0f / pos_freqs[size_t(i)];
    return;
  }
  // YaRN frequency blend (transformers' _compute_yarn_parameters): dims below
  // `low` keep their frequency (extrapolation), dims above `high` are divided
  // by `factor` (interpolation), with a linear ramp in between.
  double low = correction_dim(cfg.beta_fast, double(rope_dim), cfg.theta, cfg.original_max_position);
  double high = correction_dim(cfg.beta_slow, double(rope_dim), cfg.theta, cfg.original_max_position);
  if (cfg.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rope_dim - 1));
  if (low == high) high += 0.001;  // as HF: avoid a zero-width ramp
  const float factor = float(cfg.factor);
  for (int64_t i = 0; i < half; ++i) {
    const float pf = pos_freqs[size_t(i)];
    const float extrapolation = 1.0f / pf;
    const float interpolation = 1.0f / (factor * pf);
    float ramp = (float(i) - float(low)) / (float(high) - float(low));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq_[size_t(i)] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

void RopeTable::angles(int64_t pos, float* cos, float* sin) const {
  const float p = float(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float a = p * inv_freq_[i];
    cos[i] = std::cos(a) * attention_factor_;
    sin[i] = std::sin(a) * attention_factor_;
  }
}

void RopeTable::apply(float* x, int64_t count, int64_t width, int64_t pos, bool inverse) const {
  const int64_t half = rope_dim_ / 2;
  float cs[256], sn[256];
  std::vector<float> big_c, big_s;
  float* c = cs;
  float* s = sn;
  if (half > 256) {
    big_c.resize(size_t(half));
    big_s.resize(size_t(half));
    c = big_c.data();
    s = big_s.data();
  }
  angles(pos, c, s);
  for (int64_t v = 0; v < count; ++v) {
    float* r = x + v * width + (width - rope_dim_);
    for (int64_t i = 0; i < half; ++i) {
      const float si = inverse ? -s[i] : s[i];
      const float x0 = r[2 * i], x1 = r[2 * i + 1];
      // HF: x * cos + rotate_half(x) * sin, rotate_half(x0, x1) = (-x1, x0).
      r[2 * i] = x0 * c[i] + (-x1) * si;
      r[2 * i + 1] = x1 * c[i] + x0 * si;
    }
  }
}

}  // namespace nibble
