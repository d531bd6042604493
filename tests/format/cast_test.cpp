// MXFP4 <-> NVFP4 casts against tools/format_ref.py vectors, plus the
// properties the cast promises: inside the 17-binade window nibbles are
// copied and every dequantized value is identical; outside it blocks are
// counted; NaN scales and impossible k_max throw.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "fixtures.h"
#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::load;
using test::manifest;

std::vector<float> mx_values(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales,
                             int64_t rows, int64_t cols) {
  std::vector<float> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    mxfp4_dequantize_row(&packed[r * cols / 2], &scales[r * cols / 32], cols, &y[r * cols]);
  return y;
}

std::vector<float> nv_values(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales,
                             int64_t rows, int64_t cols, float s_g) {
  std::vector<float> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    nvfp4_dequantize_row(&packed[r * cols / 2], &scales[r * cols / 16], cols, s_g, &y[r * cols]);
  return y;
}

void expect_stats(const CastStats& st, const nlohmann::json& meta) {
  EXPECT_EQ(st.blocks, meta.at("blocks").get<int64_t>());
  EXPECT_EQ(st.exact, meta.at("exact").get<int64_t>());
  EXPECT_EQ(st.requantized, meta.at("requantized").get<int64_t>());
  EXPECT_EQ(st.max_abs_error, meta.at("max_abs_error").get<double>());
}

TEST(CastVectors, InsideTheWindowIsBitExact) {
  auto mx_p = load<uint8_t>("cast_in_mx_packed");
  auto mx_s = load<uint8_t>("cast_in_mx_scales");
  auto nv_s_ref = load<uint8_t>("cast_in_nv_scales");
  auto values = load<float>("cast_in_values");
  const auto& meta = manifest().at("cast").at("in");
  const int64_t rows = mx_p.dim(0), cols = mx_p.dim(1) * 2;
  const int k_max = mxfp4_max_exponent(mx_s.data.data(), int64_t(mx_s.size()));
  ASSERT_EQ(k_max, meta.at("k_max").get<int>());
  const float s_g = mxfp4_to_nvfp4_global_scale(k_max);
  ASSERT_EQ(s_g, meta.at("global_scale").get<float>());

  std::vector<uint8_t> nv_p(rows * cols / 2), nv_s(rows * cols / 16);
  CastStats st = mxfp4_to_nvfp4(mx_p.data.data(), mx_s.data.data(), rows, cols, k_max,
                                nv_p.data(), nv_s.data());
  expect_stats(st, meta);
  EXPECT_EQ(nv_p, mx_p.data) << "codes must be copied byte for byte";
  EXPECT_EQ(nv_s, nv_s_ref.data);
  // Every value identical: the NVFP4 dequantization of the result, the
  // MXFP4 dequantization of the input and the oracle's values.
  auto nv_y = nv_values(nv_p, nv_s, rows, cols, s_g);
  auto mx_y = mx_values(mx_p.data, mx_s.data, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(test::f32_bits(mx_y[i]), test::f32_bits(values[i])) << i;
    ASSERT_EQ(test::f32_bits(nv_y[i]), test::f32_bits(values[i])) << i;
  }
}

TEST(CastVectors, OutsideTheWindowIsRequantizedAndCounted) {
  auto mx_p = load<uint8_t>("cast_out_mx_packed");
  auto mx_s = load<uint8_t>("cast_out_mx_scales");
  auto nv_p_ref = load<uint8_t>("cast_out_nv_packed");
  auto nv_s_ref = load<uint8_t>("cast_out_nv_scales");
  const auto& meta = manifest().at("cast").at("out");
  const int64_t rows = mx_p.dim(0), cols = mx_p.dim(1) * 2;
  ASSERT_EQ(mxfp4_max_exponent(mx_s.data.data(), int64_t(mx_s.size())),
            meta.at("own_k_max").get<int>());
  const int k_max = meta.at("k_max").get<int>();  // shared with a (virtual) w3
  std::vector<uint8_t> nv_p(rows * cols / 2), nv_s(rows * cols / 16);
  CastStats st = mxfp4_to_nvfp4(mx_p.data.data(), mx_s.data.data(), rows, cols, k_max,
                                nv_p.data(), nv_s.data());
  expect_stats(st, meta);
  EXPECT_GT(st.requantized, 0);
  EXPECT_EQ(nv_p, nv_p_ref.data);
  EXPECT_EQ(nv_s, nv_s_ref.data);
  // max_abs_error is the real error over the tensor.
  const float s_g = mxfp4_to_nvfp4_global_scale(k_max);
  auto nv_y = nv_values(nv_p, nv_s, rows, cols, s_g);
  auto mx_y = mx_values(mx_p.data, mx_s.data, rows, cols);
  double err = 0;
  for (int64_t i = 0; i < rows * cols; ++i) err = std::max(err, std::fabs(double(nv_y[i]) - mx_y[i]));
  EXPECT_EQ(err, st.max_abs_error);
}

TEST(CastVectors, Nvfp4ToMxfp4MatchesReference) {
  auto nv_p = load<uint8_t>("nvfp4_tensor_packed");
  auto nv_s = load<uint8_t>("nvfp4_tensor_scales");
  auto mx_p_ref = load<uint8_t>("nv2mx_tensor_mx_packed");
  auto mx_s_ref = load<uint8_t>("nv2mx_tensor_mx_scales");
  const auto& meta = manifest().at("cast").at("nv2mx_tensor");
  const int64_t rows = nv_p.dim(0), cols = nv_p.dim(1) * 2;
  std::vector<uint8_t> mx_p(rows * cols / 2), mx_s(rows * cols / 32);
  CastStats st = nvfp4_to_mxfp4(nv_p.data.data(), nv_s.data.data(), rows, cols,
                                meta.at("global_scale").get<float>(), mx_p.data(), mx_s.data());
  expect_stats(st, meta);
  EXPECT_EQ(mx_p, mx_p_ref.data);
  EXPECT_EQ(mx_s, mx_s_ref.data);
}

// ---- properties -------------------------------------------------------------------

struct MxTensor {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scales;
};

MxTensor random_mx(int64_t rows, int64_t cols, int k_lo, int k_hi, uint32_t seed) {
  std::mt19937 gen(seed);
  MxTensor t{rows, cols, std::vector<uint8_t>(rows * cols / 2), std::vector<uint8_t>(rows * cols / 32)};
  for (auto& b : t.packed) b = uint8_t(gen());
  std::uniform_int_distribution<int> k(k_lo, k_hi);
  for (auto& s : t.scales) s = uint8_t(k(gen) + 127);
  return t;
}

// MXFP4 -> NVFP4 -> MXFP4 keeps every value when the whole tensor is inside
// the window, at the extremes of the exponent range too.
TEST(CastProperties, RoundTripThroughNvfp4KeepsValues) {
  for (auto [lo, hi] : {std::pair{-10, 5}, std::pair{-127, -110}, std::pair{105, 122}}) {
    MxTensor t = random_mx(8, 128, lo, hi, uint32_t(lo + 1000));
    const int k_max = mxfp4_max_exponent(t.scales.data(), int64_t(t.scales.size()));
    const float s_g = mxfp4_to_nvfp4_global_scale(k_max);
    std::vector<uint8_t> nv_p(t.packed.size()), nv_s(t.scales.size() * 2);
    CastStats st = mxfp4_to_nvfp4(t.packed.data(), t.scales.data(), t.rows, t.cols, k_max,
                                  nv_p.data(), nv_s.data());
    EXPECT_EQ(st.exact, st.blocks);
    EXPECT_EQ(st.max_abs_error, 0);
    auto mx_y = mx_values(t.packed, t.scales, t.rows, t.cols);
    auto nv_y = nv_values(nv_p, nv_s, t.rows, t.cols, s_g);
    for (size_t i = 0; i < mx_y.size(); ++i) ASSERT_EQ(nv_y[i], mx_y[i]) << lo << " " << i;

    std::vector<uint8_t> back_p(t.packed.size()), back_s(t.scales.size());
    CastStats back = nvfp4_to_mxfp4(nv_p.data(), nv_s.data(), t.rows, t.cols, s_g, back_p.data(),
                                    back_s.data());
    EXPECT_EQ(back.exact, back.blocks) << lo;
    auto back_y = mx_values(back_p, back_s, t.rows, t.cols);
    for (size_t i = 0; i < mx_y.size(); ++i) ASSERT_EQ(back_y[i], mx_y[i]) << lo << " " << i;
  }
}

TEST(CastProperties, WindowEdgeIs17Binades) {
  MxTensor t = random_mx(1, 96, 0, 0, 3);
  t.scales = {127 + 20, 127 + 3, 127 + 2};  // d = 0, 17, 18
  std::vector<uint8_t> nv_p(48), nv_s(6);
  CastStats st = mxfp4_to_nvfp4(t.packed.data(), t.scales.data(), 1, 96, 20, nv_p.data(),
                                nv_s.data());
  EXPECT_EQ(st.blocks, 3);
  EXPECT_EQ(st.exact, 2);
  EXPECT_EQ(st.requantized, 1);
  EXPECT_EQ(nv_s[0], e4m3_encode(256.0f));
  EXPECT_EQ(nv_s[2], 0x01);  // 2^-9, E4M3's smallest subnormal
  EXPECT_EQ(nv_s[3], 0x01);
}

TEST(CastErrors, BadScalesAndKMaxThrow) {
  MxTensor t = random_mx(2, 64, -3, 3, 4);
  std::vector<uint8_t> nv_p(64), nv_s(8), mx_p(64), mx_s(4);
  t.scales[3] = 0xFF;
  EXPECT_THROW(mxfp4_max_exponent(t.scales.data(), 4), Error);
  EXPECT_THROW(mxfp4_to_nvfp4(t.packed.data(), t.scales.data(), 2, 64, 3, nv_p.data(), nv_s.data()),
               Error);
  t.scales[3] = 127 + 3;
  EXPECT_EQ(mxfp4_max_exponent(t.scales.data(), 4), 3);
  EXPECT_THROW(mxfp4_max_exponent(t.scales.data(), 0), Error);
  // k_max below a block's exponent would need an E4M3 scale above 2^8.
  EXPECT_THROW(mxfp4_to_nvfp4(t.packed.data(), t.scales.data(), 2, 64, 2, nv_p.data(), nv_s.data()),
               Error);
  EXPECT_THROW(mxfp4_to_nvfp4_global_scale(128), Error);
  EXPECT_THROW(mxfp4_to_nvfp4(t.packed.data(), t.scales.data(), 2, 48, 3, nv_p.data(), nv_s.data()),
               Error);
  std::vector<uint8_t> bad_nv_s(8, 0x38);
  bad_nv_s[5] = 0x7F;
  EXPECT_THROW(nvfp4_to_mxfp4(t.packed.data(), bad_nv_s.data(), 2, 64, 1.0f, mx_p.data(),
                              mx_s.data()),
               Error);
  bad_nv_s[5] = 0x38;
  EXPECT_THROW(nvfp4_to_mxfp4(t.packed.data(), bad_nv_s.data(), 2, 64, NAN, mx_p.data(),
                              mx_s.data()),
               Error);
}

}  // namespace
}  // namespace nibble
