// Random weight matrices in any stored format, for kernel tests and
// `nibble bench`: codes and scales are drawn directly (not quantized from
// floats), which covers every code, including FP4's -0 and E4M3 subnormals.
// The values are spread like real weights (scales in a narrow band around a
// typical magnitude), never constant.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weights.h"

namespace nibble {

// Move-only: the view points into the vectors.
struct OwnedWeights {
  OwnedWeights() = default;
  OwnedWeights(OwnedWeights&&) = default;
  OwnedWeights& operator=(OwnedWeights&&) = default;
  OwnedWeights(const OwnedWeights&) = delete;
  OwnedWeights& operator=(const OwnedWeights&) = delete;

  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  WeightView view;  // points into data / scales
};

// W[rows, cols] in `format` (not int_index). FP4 formats need cols divisible
// by their block (32 / 16), int4 by its group (32). E4M3 NaN codes (0x7F, 0xFF) are never drawn.
OwnedWeights random_weights(Format format, int64_t rows, int64_t cols, uint64_t seed,
                            Fp8ScaleType fp8_scale = Fp8ScaleType::ue8m0);

// Deterministic Gaussian floats (Box-Muller over splitmix64), mean 0.
void random_normal(float* out, int64_t n, uint64_t seed, float stddev = 1.0f);

}  // namespace nibble
