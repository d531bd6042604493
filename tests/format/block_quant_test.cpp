// Block quantizers and dequantizers against the numpy reference of
// tools/format_ref.py (vectors from tools/gen_format_vectors.py), bit for
// bit; then properties: quantize -> dequantize stays within half an E2M1 /
// E4M3 step of the input (or saturates), bad input throws.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fixtures.h"
#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::load;
using test::manifest;

template <class T>
void expect_bytes_equal(const std::vector<T>& got, const std::vector<T>& expected,
                        const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 20; ++i) {
    if (std::memcmp(&got[i], &expected[i], sizeof(T)) != 0) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: got " << +got[i] << " expected " << +expected[i];
    }
  }
}

// ---- MXFP4 ----------------------------------------------------------------------

TEST(Mxfp4Vectors, QuantizeMatchesReference) {
  auto x = load<float>("mxfp4_x");
  auto packed = load<uint8_t>("mxfp4_packed");
  auto scales = load<uint8_t>("mxfp4_scales");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  std::vector<uint8_t> p(rows * cols / 2), s(rows * cols / 32);
  for (int64_t r = 0; r < rows; ++r)
    mxfp4_quantize_row(&x.data[r * cols], cols, &p[r * cols / 2], &s[r * cols / 32]);
  expect_bytes_equal(s, scales.data, "mxfp4 scales");
  expect_bytes_equal(p, packed.data, "mxfp4 packed");
}

// Whole-tensor dequantize = E2M1 value * 2^(e-127), which is exact in f32, so
// it must equal the same product done in double.
TEST(Mxfp4Vectors, DequantizeIsExact) {
  auto packed = load<uint8_t>("mxfp4_packed");
  auto scales = load<uint8_t>("mxfp4_scales");
  const int64_t rows = packed.dim(0), cols = packed.dim(1) * 2;
  std::vector<float> y(cols);
  for (int64_t r = 0; r < rows; ++r) {
    mxfp4_dequantize_row(&packed.data[r * cols / 2], &scales.data[r * cols / 32], cols, y.data());
    for (int64_t i = 0; i < cols; ++i) {
      uint8_t byte = packed.data[r * cols / 2 + i / 2];
      int code = (i % 2) ? byte >> 4 : byte & 0xF;
      double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
      double v = (code & 8 ? -1 : 1) * mag[code & 7] *
                 std::ldexp(1.0, int(scales.data[r * cols / 32 + i / 32]) - 127);
      ASSERT_EQ(double(y[i]), v) << "row " << r << " col " << i;
    }
  }
}

// ---- NVFP4 ----------------------------------------------------------------------

class Nvfp4Vectors : public ::testing::TestWithParam<std::string> {};

TEST_P(Nvfp4Vectors, QuantizeAndDequantizeMatchReference) {
  const std::string c = GetParam();
  auto x = load<float>("nvfp4_" + c + "_x");
  auto packed = load<uint8_t>("nvfp4_" + c + "_packed");
  auto scales = load<uint8_t>("nvfp4_" + c + "_scales");
  auto y_ref = load<float>("nvfp4_" + c + "_y");
  const auto& meta = manifest().at("nvfp4").at(c);
  const float s_g = meta.at("global_scale").get<float>();
  if (!meta.at("amax").is_null()) {
    // The case's s_g came from ModelOpt's formula on the tensor's amax.
    float amax = 0;
    for (float v : x.data) amax = std::max(amax, std::fabs(v));
    ASSERT_EQ(amax, meta.at("amax").get<float>());
    ASSERT_EQ(test::f32_bits(nvfp4_global_scale(amax)), test::f32_bits(s_g));
  }
  const int64_t rows = x.dim(0), cols = x.dim(1);
  std::vector<uint8_t> p(rows * cols / 2), s(rows * cols / 16);
  std::vector<float> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    nvfp4_quantize_row(&x.data[r * cols], cols, s_g, &p[r * cols / 2], &s[r * cols / 16]);
    nvfp4_dequantize_row(&packed.data[r * cols / 2], &scales.data[r * cols / 16], cols, s_g,
                         &y[r * cols]);
  }
  expect_bytes_equal(s, scales.data, "nvfp4 " + c + " scales");
  expect_bytes_equal(p, packed.data, "nvfp4 " + c + " packed");
  expect_bytes_equal(y, y_ref.data, "nvfp4 " + c + " dequantized");
}

INSTANTIATE_TEST_SUITE_P(Cases, Nvfp4Vectors,
                         ::testing::Values("tensor", "ties", "small_sg", "odd_sg", "order"));

// ---- FP8 block-128 ----------------------------------------------------------------

class Fp8Vectors : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Vectors, QuantizeMatchesReferenceForBothScaleTypes) {
  const std::string c = GetParam();
  auto x = load<float>("fp8_" + c + "_x");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  ASSERT_EQ(manifest().at("fp8").at(c).at("rows").get<int64_t>(), rows);
  const int64_t tiles = ((rows + 127) / 128) * ((cols + 127) / 128);
  std::vector<uint8_t> w(rows * cols);
  std::vector<float> y(rows * cols);

  auto w_ue8m0 = load<uint8_t>("fp8_" + c + "_w_ue8m0");
  auto s_ue8m0 = load<uint8_t>("fp8_" + c + "_s_ue8m0");
  ASSERT_EQ(int64_t(s_ue8m0.size()), tiles);
  std::vector<uint8_t> s8(tiles);
  fp8_block_quantize(x.data.data(), rows, cols, Fp8ScaleType::ue8m0, w.data(), s8.data());
  expect_bytes_equal(s8, s_ue8m0.data, "fp8 " + c + " ue8m0 scales");
  expect_bytes_equal(w, w_ue8m0.data, "fp8 " + c + " ue8m0 codes");

  auto w_f32 = load<uint8_t>("fp8_" + c + "_w_f32");
  auto s_f32 = load<float>("fp8_" + c + "_s_f32");
  std::vector<float> s32(tiles);
  fp8_block_quantize(x.data.data(), rows, cols, Fp8ScaleType::f32, w.data(), s32.data());
  expect_bytes_equal(s32, s_f32.data, "fp8 " + c + " f32 scales");
  expect_bytes_equal(w, w_f32.data, "fp8 " + c + " f32 codes");

  // Dequantize: one f32 product per element, with the tile's scale.
  for (int pass = 0; pass < 2; ++pass) {
    const bool ue = pass == 0;
    const auto& codes = ue ? w_ue8m0.data : w_f32.data;
    fp8_block_dequantize(codes.data(), rows, cols,
                         ue ? static_cast<const void*>(s_ue8m0.data.data()) : s_f32.data.data(),
                         ue ? Fp8ScaleType::ue8m0 : Fp8ScaleType::f32, y.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) {
        int64_t t = (r / 128) * ((cols + 127) / 128) + col / 128;
        float scale = ue ? std::ldexp(1.0f, int(s_ue8m0[t]) - 127) : s_f32[t];
        ASSERT_EQ(y[r * cols + col], e4m3_decode(codes[r * cols + col]) * scale)
            << c << (ue ? " ue8m0" : " f32") << " [" << r << ", " << col << "]";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8Vectors,
                         ::testing::Values("mixed", "edge", "row", "col", "full"));

// ---- properties on fresh random data ---------------------------------------------

// Random values spanning many binades, with zeros and an outlier per row.
std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> binade(-30, 30);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(normal(gen), binade(gen) / 4);
  for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) x[i] = 0;  // one all-zero MX block
  if (n > 40) x[40] *= 1000;
  return x;
}

// |E2M1-rounded(a) - a| for a = |x| / scale <= 6 is at most half the E2M1 gap
// around a; above 6 the result must be exactly 6.
void expect_within_half_step(float x, float y, double scale, const std::string& where) {
  double a = std::fabs(double(x)) / scale;
  if (a > 6) {
    EXPECT_EQ(std::fabs(double(y)), 6 * scale) << where;
    return;
  }
  double half = a <= 2 ? 0.25 : a <= 4 ? 0.5 : 1.0;
  EXPECT_LE(std::fabs(double(y) - double(x)), half * scale) << where << " x=" << x << " y=" << y;
}

TEST(BlockProperties, Mxfp4RoundTripWithinHalfStep) {
  const int64_t n = 32 * 64;
  auto x = random_row(n, 7);
  std::vector<uint8_t> p(n / 2), s(n / 32);
  std::vector<float> y(n);
  mxfp4_quantize_row(x.data(), n, p.data(), s.data());
  mxfp4_dequantize_row(p.data(), s.data(), n, y.data());
  EXPECT_EQ(s[0], 127) << "all-zero block takes the neutral scale 2^0";
  for (int64_t i = 0; i < n; ++i) {
    double scale = std::ldexp(1.0, int(s[i / 32]) - 127);
    expect_within_half_step(x[i], y[i], scale, "mxfp4 element " + std::to_string(i));
  }
}

TEST(BlockProperties, Nvfp4RoundTripWithinHalfStep) {
  const int64_t n = 16 * 128;
  auto x = random_row(n, 8);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float s_g = nvfp4_global_scale(amax);
  std::vector<uint8_t> p(n / 2), s(n / 16);
  std::vector<float> y(n);
  nvfp4_quantize_row(x.data(), n, s_g, p.data(), s.data());
  nvfp4_dequantize_row(p.data(), s.data(), n, s_g, y.data());
  EXPECT_EQ(s[0], 0x38) << "all-zero block takes scale 1.0 like ModelOpt";
  for (int64_t i = 0; i < n; ++i) {
    double sb = e4m3_decode(s[i / 16]);
    if (sb == 0) {
      EXPECT_EQ(y[i], 0.0f);
      continue;
    }
    // Elements are rounded against the f32 product; allow its last-bit
    // rounding on top of the half step.
    double scale = double(float(sb) * s_g);
    double a = std::fabs(double(x[i])) / scale;
    double half = a <= 2 ? 0.25 : a <= 4 ? 0.5 : 1.0;
    if (a > 6) EXPECT_EQ(std::fabs(y[i]), 6 * float(float(sb) * s_g)) << i;
    else EXPECT_LE(std::fabs(double(y[i]) - double(x[i])), half * scale + std::fabs(x[i]) * 1e-6)
        << i;
  }
}

TEST(BlockProperties, Fp8RoundTripWithinHalfStep) {
  const int64_t rows = 150, cols = 260;
  auto x = random_row(rows * cols, 9);
  for (auto type : {Fp8ScaleType::ue8m0, Fp8ScaleType::f32}) {
    std::vector<uint8_t> w(rows * cols);
    std::vector<uint8_t> s8(2 * 3);
    std::vector<float> s32(2 * 3), y(rows * cols);
    void* s = type == Fp8ScaleType::ue8m0 ? static_cast<void*>(s8.data()) : s32.data();
    fp8_block_quantize(x.data(), rows, cols, type, w.data(), s);
    fp8_block_dequantize(w.data(), rows, cols, s, type, y.data());
    for (int64_t i = 0; i < rows * cols; ++i) {
      int64_t t = (i / cols / 128) * 3 + (i % cols) / 128;
      double scale = type == Fp8ScaleType::ue8m0 ? std::ldexp(1.0, s8[t] - 127) : s32[t];
      double a = std::fabs(double(x[i])) / scale;
      ASSERT_LE(a, 448 * (1 + 1e-6)) << "the scale must cover the tile's amax";
      // E4M3 half step: 2^(floor(log2 a) - 4) for normals, 2^-10 for subnormals.
      double half = a < 0x1p-6 ? 0x1p-10 : std::ldexp(1.0, int(std::floor(std::log2(a))) - 4);
      ASSERT_LE(std::fabs(double(y[i]) - double(x[i])), half * scale + std::fabs(x[i]) * 1e-6)
          << i;
    }
  }
  // UE8M0 scales are the smallest power of two >= amax / 448.
  std::vector<float> tile(128 * 128, 0.0f);
  tile[5] = 448.0f * 0.25f;  // amax / 448 = 2^-2 exactly
  std::vector<uint8_t> w(tile.size()), s(1);
  fp8_block_quantize(tile.data(), 128, 128, Fp8ScaleType::ue8m0, w.data(), s.data());
  EXPECT_EQ(s[0], 127 - 2);
  EXPECT_EQ(w[5], 0x7E);
  tile[5] = std::nextafter(tile[5], 1000.0f);
  fp8_block_quantize(tile.data(), 128, 128, Fp8ScaleType::ue8m0, w.data(), s.data());
  EXPECT_EQ(s[0], 127 - 1);
}

TEST(BlockErrors, NonFiniteInputsAndBadShapesThrow) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> p(16), s(2);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    x[7] = bad;
    try {
      mxfp4_quantize_row(x.data(), 32, p.data(), s.data());
      FAIL() << "no throw for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("element 7"), std::string::npos) << e.what();
    }
    EXPECT_THROW(nvfp4_quantize_row(x.data(), 32, 1.0f, p.data(), s.data()), Error);
    std::vector<uint8_t> w(32);
    float s32 = 0;
    EXPECT_THROW(fp8_block_quantize(x.data(), 4, 8, Fp8ScaleType::f32, w.data(), &s32), Error);
  }
  x[7] = 1.0f;
  EXPECT_THROW(mxfp4_quantize_row(x.data(), 31, p.data(), s.data()), Error);
  EXPECT_THROW(nvfp4_quantize_row(x.data(), 24, 1.0f, p.data(), s.data()), Error);
  EXPECT_THROW(nvfp4_quantize_row(x.data(), 32, NAN, p.data(), s.data()), Error);
  EXPECT_THROW(nvfp4_quantize_row(x.data(), 32, -1.0f, p.data(), s.data()), Error);
  EXPECT_THROW(nvfp4_global_scale(NAN), Error);
  EXPECT_THROW(nvfp4_global_scale(INFINITY), Error);
  // s_g = 0 is allowed for an all-zero row, not for a non-zero one.
  EXPECT_THROW(nvfp4_quantize_row(x.data(), 32, 0.0f, p.data(), s.data()), Error);
  std::vector<float> zeros(32, 0.0f);
  nvfp4_quantize_row(zeros.data(), 32, 0.0f, p.data(), s.data());
  EXPECT_EQ(s[0], 0x38);
  for (uint8_t b : p) EXPECT_EQ(b, 0);
}

TEST(BlockErrors, NaNScaleCodesThrowOnDequantize) {
  std::vector<uint8_t> p(16, 0x21);
  std::vector<float> y(32);
  uint8_t mx_scale = 0xFF;
  EXPECT_THROW(mxfp4_dequantize_row(p.data(), &mx_scale, 32, y.data()), Error);
  uint8_t nv_scales[2] = {0x38, 0x7F};
  EXPECT_THROW(nvfp4_dequantize_row(p.data(), nv_scales, 32, 1.0f, y.data()), Error);
  nv_scales[1] = 0xFF;
  EXPECT_THROW(nvfp4_dequantize_row(p.data(), nv_scales, 32, 1.0f, y.data()), Error);
  uint8_t fp8_scale = 0xFF;
  EXPECT_THROW(fp8_block_dequantize(p.data(), 2, 8, &fp8_scale, Fp8ScaleType::ue8m0, y.data()),
               Error);
  float f32_scale = NAN;
  EXPECT_THROW(fp8_block_dequantize(p.data(), 2, 8, &f32_scale, Fp8ScaleType::f32, y.data()),
               Error);
}

}  // namespace
}  // namespace nibble
