// check_weight_codes: the NaN encodings the SIMD kernels would widen to
// finite numbers are rejected with the tensor and element named; every
// finite encoding (all codes random_weights draws) passes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu/random_weights.h"
#include "kernels/weights.h"
#include "util/error.h"

namespace nibble {
namespace {

// The error message of check_weight_codes(w, fp8_codes), or "" when it passes.
std::string error_of(const WeightView& w, bool fp8_codes = false) {
  try {
    check_weight_codes(w, fp8_codes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const WeightView& w, const std::string& part, bool fp8_codes = false) {
  const std::string msg = error_of(w, fp8_codes);
  EXPECT_NE(msg.find("layers.2.ffn.experts.5.w1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(WeightCodes, RandomWeightsPass) {
  for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16, Format::f32}) {
    OwnedWeights w = random_weights(f, 200, 4096 + 128, 3);
    EXPECT_EQ(error_of(w.view, true), "") << format_name(f);
  }
  OwnedWeights w = random_weights(Format::fp8_block128, 130, 300, 4, Fp8ScaleType::f32);
  EXPECT_EQ(error_of(w.view, true), "");
}

TEST(WeightCodes, Mxfp4NanScale) {
  OwnedWeights w = random_weights(Format::mxfp4, 9, 96, 1);
  w.view.name = "layers.2.ffn.experts.5.w1";
  w.scales[size_t(7 * 3 + 2)] = 0xFF;  // row 7, block 2
  expect_error(w.view, "MXFP4 scale [7, 2] is the UE8M0 NaN code 0xFF");
  w.scales[size_t(7 * 3 + 2)] = 0xFE;  // 2^127: finite
  EXPECT_EQ(error_of(w.view), "");
}

TEST(WeightCodes, Nvfp4NanScaleAndGlobalScale) {
  OwnedWeights w = random_weights(Format::nvfp4, 5, 48, 2);
  w.view.name = "layers.2.ffn.experts.5.w1";
  for (uint8_t nan : {uint8_t(0x7F), uint8_t(0xFF)}) {
    const uint8_t keep = w.scales[size_t(4 * 3 + 1)];
    w.scales[size_t(4 * 3 + 1)] = nan;
    expect_error(w.view, "NVFP4 scale [4, 1] is an E4M3 NaN code");
    w.scales[size_t(4 * 3 + 1)] = keep;
  }
  w.scales[0] = 0x7E;  // 448: the largest finite E4M3
  EXPECT_EQ(error_of(w.view), "");
  for (float g : {NAN, INFINITY, 0.0f, -1.0f}) {
    w.view.global_scale = g;
    expect_error(w.view, "global scale");
  }
}

TEST(WeightCodes, Fp8ScalesAndOptionalCodes) {
  OwnedWeights w = random_weights(Format::fp8_block128, 130, 300, 5);
  w.view.name = "layers.2.ffn.experts.5.w1";
  w.scales[size_t(1 * 3 + 2)] = 0xFF;  // tile row 1, tile column 2
  expect_error(w.view, "FP8 tile scale [1, 2] is the UE8M0 NaN code 0xFF");
  w.scales[size_t(1 * 3 + 2)] = 120;
  w.data[size_t(129 * 300 + 299)] = 0xFF;  // the last weight
  EXPECT_EQ(error_of(w.view), "");         // codes are only read on request
  expect_error(w.view, "FP8 weight [129, 299] is an E4M3 NaN code", true);

  OwnedWeights f = random_weights(Format::fp8_block128, 3, 200, 6, Fp8ScaleType::f32);
  f.view.name = "layers.2.ffn.experts.5.w1";
  const float inf = INFINITY;
  std::memcpy(f.scales.data() + 4, &inf, 4);  // tile [0, 1]
  expect_error(f.view, "FP8 tile scale [0, 1] is inf");
}

}  // namespace
}  // namespace nibble
