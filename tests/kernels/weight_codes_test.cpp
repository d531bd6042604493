// check_weight_codes: the NaN encodings the SIMD kernels would widen to
// finite numbers are rejected with the tensor and element named; every
// finite encoding (all codes random_weights draws) passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/random_weights.h"
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

// The word-at-a-time scan against the definition, byte by byte: every one of
// the 256 codes in every scale is a NaN exactly when UE8M0 c == 0xFF / E4M3
// (c & 0x7F) == 0x7F, and a single NaN is reported at its own index wherever
// it sits relative to the 8-byte words and 4 KB blocks (one row of 8,205
// scales: two blocks and a 13-byte tail).
TEST(WeightCodes, ScanFindsEveryCodeAtEveryOffset) {
  const int64_t n = 2 * 4096 + 13;
  std::vector<uint8_t> scales(static_cast<size_t>(n)), data(static_cast<size_t>(n) * 16);
  for (Format f : {Format::mxfp4, Format::nvfp4}) {
    SCOPED_TRACE(format_name(f));
    WeightView w;
    w.format = f;
    w.rows = 1;
    w.cols = n * (f == Format::mxfp4 ? 32 : 16);
    w.data = data.data();
    w.scales = scales.data();
    w.global_scale = 1.0f;
    w.name = "t";
    for (int c = 0; c < 256; ++c) {
      std::fill(scales.begin(), scales.end(), uint8_t(c));
      const bool nan = f == Format::mxfp4 ? c == 0xFF : (c & 0x7F) == 0x7F;
      EXPECT_EQ(error_of(w).empty(), !nan) << "code " << c;
    }
    const uint8_t ok = 0x7E, bad = f == Format::mxfp4 ? 0xFF : 0x7F;
    for (int64_t at : {int64_t(0), int64_t(7), int64_t(8), int64_t(4095), int64_t(4096), int64_t(4103),
                       int64_t(8191), int64_t(8192), int64_t(8199), n - 1}) {
      std::fill(scales.begin(), scales.end(), ok);
      scales[size_t(at)] = bad;
      EXPECT_NE(error_of(w).find("scale [0, " + std::to_string(at) + "]"), std::string::npos)
          << at << ": " << error_of(w);
      if (at + 1 < n) scales[size_t(at + 1)] = bad;  // the first of two is named
      EXPECT_NE(error_of(w).find("scale [0, " + std::to_string(at) + "]"), std::string::npos) << at;
    }
  }
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
