// The per-matrix conversions on matrices built here, with expectations from
// the definitions (formats.md), not from the code under test: which blocks
// the MXFP4 -> NVFP4 cast keeps bit for bit, how large the error of the
// others can be, and that row ranges compose (the pipeline splits matrices
// across threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "convert/expert_convert.h"
#include "format/block.h"
#include "util/error.h"

namespace nibble {
namespace {

const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

// value of element i of row r of an MXFP4 matrix, straight from the definition
float mx_value(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales, int64_t cols, int64_t r,
               int64_t i) {
  uint8_t byte = packed[size_t(r * cols / 2 + i / 2)];
  uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  int k = int(scales[size_t(r * cols / 32 + i / 32)]) - 127;
  return kE2M1[code] * std::ldexp(1.0f, k);
}

struct MxMatrix {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scales;
  ExpertSource view() const {
    ExpertSource s;
    s.format = Format::mxfp4;
    s.rows = rows;
    s.cols = cols;
    s.data = packed.data();
    s.scales = scales.data();
    return s;
  }
};

// Random codes with a non-zero magnitude in every element, so that every
// block carries information.
MxMatrix random_mx(int64_t rows, int64_t cols, uint32_t seed) {
  MxMatrix m{rows, cols, std::vector<uint8_t>(size_t(rows * cols / 2)), std::vector<uint8_t>(size_t(rows * cols / 32))};
  std::mt19937 rng(seed);
  for (auto& b : m.packed) {
    uint8_t lo = uint8_t(1 + rng() % 7) | uint8_t((rng() & 1) << 3);
    uint8_t hi = uint8_t(1 + rng() % 7) | uint8_t((rng() & 1) << 3);
    b = uint8_t(lo | (hi << 4));
  }
  for (auto& s : m.scales) s = uint8_t(120 + rng() % 4);
  return m;
}

TEST(ExpertConvert, CastKeepsTheWindowAndCountsEveryBlockOutsideIt) {
  // 4 rows x 2 blocks. Block [0][0] sets k_max = 5; the others sit
  // d = k_max - k below it. d <= 17 must be bit-exact, d > 17 re-quantized.
  MxMatrix m = random_mx(4, 64, 7);
  const int k_max = 5;
  const int d[8] = {0, 17, 18, 3, 30, 17, 19, 127 + 5};  // the last one: k = -127
  for (int b = 0; b < 8; ++b) m.scales[size_t(b)] = uint8_t(127 + k_max - d[b]);
  int64_t expect_out = 0;
  for (int b = 0; b < 8; ++b) expect_out += d[b] > 17;

  ExpertTargetParams p;
  p.k_max = k_max;
  std::vector<uint8_t> nv(m.packed.size()), nvs(size_t(4 * 64 / 16));
  ExpertStats st = convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, 0, 4, nv.data(), nvs.data(), "t");
  EXPECT_EQ(st.blocks, 8);
  EXPECT_EQ(st.requantized, expect_out);
  EXPECT_EQ(st.exact, 8 - expect_out);  // every out-of-window block here has non-zero values

  // s_g = 2^(k_max - 8); dequantize the NVFP4 output by the definition.
  const float s_g = std::ldexp(1.0f, k_max - 8);
  std::vector<float> got(size_t(4 * 64));
  for (int64_t r = 0; r < 4; ++r)
    nvfp4_dequantize_row(nv.data() + r * 32, nvs.data() + r * 4, 64, s_g, got.data() + r * 64);
  // The largest value a block with d >= 18 can hold is 6 * 2^(k_max - 18);
  // NVFP4's smallest block scale at this s_g is 2^-9 * s_g = 2^(k_max - 17),
  // so no out-of-window value can be off by more than that magnitude.
  const double bound = 6.0 * std::ldexp(1.0, k_max - 18);
  double worst = 0;
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < 64; ++i) {
      const int b = int(r * 2 + i / 32);
      const float want = mx_value(m.packed, m.scales, 64, r, i);
      const float have = got[size_t(r * 64 + i)];
      if (d[b] <= 17) {
        EXPECT_EQ(have, want) << "block " << b << " element " << i;
      } else {
        EXPECT_LE(std::fabs(double(have) - double(want)), bound) << "block " << b;
        worst = std::max(worst, std::fabs(double(have) - double(want)));
      }
    }
    for (int b = 0; b < 2; ++b) {  // in-window blocks: the FP4 bytes themselves are copied
      if (d[r * 2 + b] <= 17) {
        EXPECT_EQ(0, std::memcmp(nv.data() + r * 32 + b * 16, m.packed.data() + r * 32 + b * 16, 16));
      }
    }
  }
  EXPECT_GT(worst, 0.0);
  EXPECT_EQ(st.max_abs_error, worst);
}

TEST(ExpertConvert, AnAllZeroBlockOutsideTheWindowIsReQuantizedButExact) {
  MxMatrix m = random_mx(1, 64, 3);
  m.scales = {127 + 4, 127 + 4 - 40};
  std::fill(m.packed.begin() + 16, m.packed.end(), uint8_t(0x88));  // -0 everywhere in block 1
  ExpertTargetParams p;
  p.k_max = 4;
  std::vector<uint8_t> nv(32), nvs(4);
  ExpertStats st = convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, 0, 1, nv.data(), nvs.data(), "t");
  EXPECT_EQ(st.requantized, 1);
  EXPECT_EQ(st.exact, 2);
  EXPECT_EQ(st.max_abs_error, 0.0);
}

TEST(ExpertConvert, RowRangesComposeToTheWholeMatrix) {
  MxMatrix m = random_mx(37, 96, 11);
  m.scales[5] = 127 + 30;  // some blocks outside the window, in several rows
  ExpertTargetParams p;
  p.k_max = mxfp4_max_exponent(m.scales.data(), int64_t(m.scales.size()));
  std::vector<uint8_t> a(m.packed.size()), as(size_t(37 * 96 / 16)), b(a.size()), bs(as.size());
  ExpertStats whole = convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, 0, 37, a.data(), as.data(), "t");
  ExpertStats parts;
  for (int64_t r0 = 0; r0 < 37; r0 += 5) {
    int64_t r1 = std::min<int64_t>(37, r0 + 5);
    parts.merge(convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, r0, r1, b.data() + r0 * 48,
                                    bs.data() + r0 * 6, "t"));
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(as, bs);
  EXPECT_EQ(whole.blocks, parts.blocks);
  EXPECT_EQ(whole.exact, parts.exact);
  EXPECT_EQ(whole.requantized, parts.requantized);
  EXPECT_EQ(whole.max_abs_error, parts.max_abs_error);
  EXPECT_GT(whole.requantized, 0);
}

TEST(ExpertConvert, BlocksOfPowerOfTwoScaledE2M1ValuesSurviveFloatToMxfp4) {
  // Each 32-block holds c * 2^k with c from E2M1 and one |c| = 6 (or 4): the
  // OCP scale is then 2^k exactly and every value is representable.
  const int64_t rows = 3, cols = 64;
  std::vector<float> x(size_t(rows * cols));
  std::mt19937 rng(5);
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const int k = int(rng() % 20) - 10;
    for (int64_t i = 0; i < 32; ++i) x[size_t(b * 32 + i)] = kE2M1[rng() % 16] * std::ldexp(1.0f, k);
    x[size_t(b * 32 + 7)] = (b % 2 ? 4.0f : 6.0f) * std::ldexp(1.0f, k);
  }
  ExpertSource s;
  s.format = Format::f32;
  s.rows = rows;
  s.cols = cols;
  s.data = reinterpret_cast<const uint8_t*>(x.data());
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 32));
  ExpertStats st = convert_expert_rows(s, ExpertOp::float_to_mxfp4, {}, 0, rows, packed.data(), scales.data(), "t");
  EXPECT_EQ(st.blocks, rows * cols / 32);
  EXPECT_EQ(st.exact, st.blocks);
  EXPECT_EQ(st.max_abs_error, 0.0);
  // One value off the grid: that block, and only it, becomes lossy.
  x[40] = 1.25f * std::fabs(x[40] == 0 ? 1.0f : x[40]);
  st = convert_expert_rows(s, ExpertOp::float_to_mxfp4, {}, 0, rows, packed.data(), scales.data(), "t");
  EXPECT_EQ(st.exact, st.blocks - 1);
  EXPECT_GT(st.max_abs_error, 0.0);
}

// E4M3 (OCP FP8, bias 7, no infinities) decoded from the definition.
double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

TEST(ExpertConvert, InWindowScalesArePowersOfTwoRelativeToKMax) {
  // Every distance d = k_max - k in [0, 17], at an ordinary k_max and at one
  // so small that the smallest block exponents reach UE8M0 code 0.
  for (int k_max : {5, -110, -120}) {
    MxMatrix m = random_mx(6, 96, 21);  // 18 blocks
    for (int b = 0; b < 18; ++b) m.scales[size_t(b)] = uint8_t(std::max(0, 127 + k_max - b));
    std::vector<uint8_t> nvs(size_t(6 * 96 / 16), 0xEE);
    ExpertStats st = cast_scales_in_window(m.view(), k_max, 0, 6, nvs.data(), "t");
    EXPECT_EQ(st.blocks, 18);
    EXPECT_EQ(st.exact, 18);
    EXPECT_EQ(st.requantized, 0);
    for (int b = 0; b < 18; ++b) {
      const int k = int(m.scales[size_t(b)]) - 127;
      // NVFP4 value = code * s_b * s_g with s_g = 2^(k_max - 8): s_b must be 2^(k - k_max + 8).
      const double want = std::ldexp(1.0, k - k_max + 8);
      EXPECT_EQ(e4m3_value(nvs[size_t(2 * b)]), want) << "k_max " << k_max << " block " << b;
      EXPECT_EQ(nvs[size_t(2 * b + 1)], nvs[size_t(2 * b)]) << "both halves share the scale";
    }
    // The same scales as the full cast, which also copies the FP4 bytes.
    std::vector<uint8_t> nv(m.packed.size()), full(nvs.size());
    ExpertTargetParams p;
    p.k_max = k_max;
    convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, 0, 6, nv.data(), full.data(), "t");
    EXPECT_EQ(full, nvs);
    EXPECT_EQ(nv, m.packed);
    // A row range writes only its rows.
    std::vector<uint8_t> part(size_t(2 * 96 / 16));
    cast_scales_in_window(m.view(), k_max, 3, 5, part.data(), "t");
    EXPECT_TRUE(std::equal(part.begin(), part.end(), nvs.begin() + 3 * 6));
  }
}

TEST(ExpertConvert, InWindowScalesRejectWhatTheLosslessCastCannotCopy) {
  struct Case {
    uint8_t code;
    const char* says;
  } cases[] = {{uint8_t(127 + 5 - 18), "outside the lossless window"},  // d = 18
               {uint8_t(127 + 6), "outside the lossless window"},       // above k_max
               {0xFF, "NaN"}};
  for (const Case& c : cases) {
    MxMatrix m = random_mx(3, 64, 5);
    for (auto& e : m.scales) e = 127 + 5;
    m.scales[3] = c.code;  // row 1, block 1
    std::vector<uint8_t> nvs(size_t(3 * 64 / 16));
    try {
      cast_scales_in_window(m.view(), 5, 0, 3, nvs.data(), "layers.2.ffn.experts.9.w3");
      FAIL() << "scale code " << int(c.code) << " must be an error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layers.2.ffn.experts.9.w3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("block [1, 1]"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    }
  }
}

TEST(ExpertConvert, ExponentRangeIsTheSmallestAndLargestBlockExponent) {
  MxMatrix m = random_mx(33, 160, 17);  // 165 scales
  std::mt19937 rng(4);
  for (auto& e : m.scales) e = uint8_t(100 + rng() % 50);
  m.scales[77] = 3;
  m.scales[164] = 0xFE;  // the last one, after every full vector
  ExponentRange r = mxfp4_matrix_exponent_range(m.view(), "t");
  EXPECT_EQ(r.min, 3 - 127);
  EXPECT_EQ(r.max, 0xFE - 127);
  m.scales[101] = 0xFF;
  try {
    mxfp4_matrix_exponent_range(m.view(), "layers.0.ffn.experts.4.w1");
    FAIL() << "a NaN scale must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.4.w1.scale"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("101"), std::string::npos) << e.what();
  }
}

TEST(ExpertConvert, ErrorsNameTheTensor) {
  MxMatrix m = random_mx(2, 32, 1);
  m.scales[1] = 0xFF;  // UE8M0 NaN
  std::vector<uint8_t> nv(m.packed.size()), nvs(4);
  ExpertTargetParams p;
  p.k_max = 0;
  try {
    convert_expert_rows(m.view(), ExpertOp::mxfp4_to_nvfp4, p, 0, 2, nv.data(), nvs.data(), "layers.0.ffn.experts.1.w2");
    FAIL() << "a NaN scale must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.1.w2"), std::string::npos) << e.what();
  }
  try {
    mxfp4_matrix_max_exponent(m.view(), "layers.0.ffn.experts.1.w2");
    FAIL() << "a NaN scale must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.1.w2.scale"), std::string::npos) << e.what();
  }
  std::vector<uint16_t> bf(64, 0x3F80);  // 1.0
  bf[37] = 0x7FC0;                       // NaN in row 1
  ExpertSource s;
  s.format = Format::bf16;
  s.rows = 2;
  s.cols = 32;
  s.data = reinterpret_cast<const uint8_t*>(bf.data());
  try {
    float_matrix_amax(s, "w");
    FAIL() << "NaN must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> packed(32), scales(4);
  try {
    convert_expert_rows(s, ExpertOp::float_to_nvfp4, {0, 1.0f}, 0, 2, packed.data(), scales.data(), "w9");
    FAIL() << "NaN must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
}

TEST(ExpertConvert, Bf16AmaxIsTheLargestMagnitude) {
  // -3.5 (0xC060), 2.0 (0x4000), -0.0, 1e-40-ish subnormal (0x0001)
  std::vector<uint16_t> bf = {0x4000, 0xC060, 0x8000, 0x0001};
  ExpertSource s;
  s.format = Format::bf16;
  s.rows = 1;
  s.cols = 4;
  s.data = reinterpret_cast<const uint8_t*>(bf.data());
  EXPECT_EQ(float_matrix_amax(s, "w"), 3.5f);
}

}  // namespace
}  // namespace nibble
