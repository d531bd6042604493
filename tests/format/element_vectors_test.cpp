// Element codecs against ml_dtypes (tools/gen_format_vectors.py): every code
// decoded, >100k f32 values encoded into each type (ties, subnormals, values
// past the maximum, NaN, inf, random bit patterns), bit for bit. Plus
// properties that need no oracle: every code round-trips, encoders pick a
// nearest value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "fixtures.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::load;
using test::same_float;

template <class Decode>
void expect_decode_table(const char* name, int codes, Decode decode) {
  auto expected = load<float>(name);
  ASSERT_EQ(int(expected.size()), codes);
  for (int c = 0; c < codes; ++c)
    EXPECT_TRUE(same_float(decode(uint8_t(c)), expected[c]))
        << name << " code 0x" << std::hex << c << ": got " << decode(uint8_t(c)) << " expected "
        << expected[c];
}

TEST(ElementVectors, DecodeEveryCode) {
  expect_decode_table("decode_e2m1", 16, e2m1_decode);
  expect_decode_table("decode_e4m3", 256, e4m3_decode);
  expect_decode_table("decode_e5m2", 256, e5m2_decode);
  expect_decode_table("decode_ue8m0", 256, ue8m0_decode);
}

// expected 0xFF marks an input the encoder must reject (NaN, or <= 0 for UE8M0).
void expect_encodes(const char* name, uint8_t (*encode)(float)) {
  auto in = load<float>("encode_in");
  auto expected = load<uint8_t>(name);
  ASSERT_EQ(in.size(), expected.size());
  ASSERT_GE(in.size(), 100000u);
  int64_t failures = 0, throws = 0;
  for (size_t i = 0; i < in.size() && failures < 20; ++i) {
    if (expected[i] == 0xFF) {
      ++throws;
      EXPECT_THROW(encode(in[i]), Error) << name << " of " << in[i];
      continue;
    }
    uint8_t got = encode(in[i]);
    if (got != expected[i]) {
      ++failures;
      ADD_FAILURE() << name << " of " << in[i] << " (bits 0x" << std::hex << test::f32_bits(in[i])
                    << "): got 0x" << int(got) << " expected 0x" << int(expected[i]);
    }
  }
  EXPECT_GT(throws, 0) << name << ": the vectors should exercise the error path";
}

TEST(ElementVectors, EncodeE2M1) { expect_encodes("encode_e2m1", e2m1_encode); }
TEST(ElementVectors, EncodeE4M3) { expect_encodes("encode_e4m3", e4m3_encode); }
TEST(ElementVectors, EncodeE5M2) { expect_encodes("encode_e5m2", e5m2_encode); }
TEST(ElementVectors, EncodeUE8M0) { expect_encodes("encode_ue8m0", ue8m0_encode); }

TEST(ElementVectors, EncodeBF16) {
  auto in = load<float>("encode_in");
  auto expected = load<uint16_t>("encode_bf16");
  ASSERT_EQ(in.size(), expected.size());
  int64_t failures = 0;
  for (size_t i = 0; i < in.size() && failures < 20; ++i) {
    uint16_t got = bf16_encode(in[i]);
    if (got != expected[i]) {
      ++failures;
      ADD_FAILURE() << "bf16 of bits 0x" << std::hex << test::f32_bits(in[i]) << ": got 0x" << got
                    << " expected 0x" << expected[i];
    }
  }
}

// ---- properties -----------------------------------------------------------------

// Every non-NaN code decodes to a value that encodes back to the same code
// (except -0 for UE8M0, which has no sign, and E5M2 inf, which saturates).
TEST(ElementProperties, EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_encode(e2m1_decode(uint8_t(c))), c);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) {
      EXPECT_EQ(e4m3_encode(e4m3_decode(uint8_t(c))), c) << c;
    }
    if ((c & 0x7F) < 0x7C) {
      EXPECT_EQ(e5m2_encode(e5m2_decode(uint8_t(c))), c) << c;
    }
    if (c != 0xFF) {
      EXPECT_EQ(ue8m0_encode(ue8m0_decode(uint8_t(c))), c) << c;
    }
  }
  EXPECT_EQ(e5m2_encode(INFINITY), 0x7B);
  EXPECT_EQ(e5m2_encode(-INFINITY), 0xFB);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_decode(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(bf16_encode(f), h);
    }
  }
}

// Saturating RNE means: the result is a nearest finite value to x clamped to
// [-max, max], and on a tie it is the one with the even code. Checked by
// brute force over all codes on random inputs, in double.
void expect_nearest(const char* name, uint8_t (*encode)(float), float (*decode)(uint8_t),
                    int codes, float lo, float hi) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> log_mag(lo, hi);
  float max_finite = 0;
  for (int c = 0; c < codes; ++c)
    if (std::isfinite(decode(uint8_t(c)))) max_finite = std::max(max_finite, decode(uint8_t(c)));
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(log_mag(gen)) * ((gen() & 1) ? -1.0f : 1.0f);
    double target = std::clamp(double(x), -double(max_finite), double(max_finite));
    uint8_t got = encode(x);
    double err = std::fabs(decode(got) - target);
    for (int c = 0; c < codes; ++c) {
      float v = decode(uint8_t(c));
      if (!std::isfinite(v)) continue;
      double e = std::fabs(v - target);
      ASSERT_LE(err, e) << name << "(" << x << ") = code " << int(got) << " but code " << c
                        << " is nearer";
      if (e == err && v != decode(got) && (c & 1) == 0) {
        ASSERT_EQ(got & 1, 0) << name << "(" << x << "): tie not broken to even";
      }
    }
  }
}

TEST(ElementProperties, EncodersPickANearestValue) {
  expect_nearest("e2m1", e2m1_encode, e2m1_decode, 16, -5, 4);
  expect_nearest("e4m3", e4m3_encode, e4m3_decode, 256, -12, 10);
  expect_nearest("e5m2", e5m2_encode, e5m2_decode, 256, -18, 18);
}

TEST(ElementProperties, NaNThrowsNamingTheType) {
  try {
    e4m3_encode(NAN);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("E4M3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(e5m2_encode(NAN), Error);
  EXPECT_THROW(ue8m0_encode(NAN), Error);
  EXPECT_THROW(ue8m0_encode(-1.0f), Error);
  EXPECT_THROW(ue8m0_encode(-0.0f), Error);
  EXPECT_TRUE(std::isnan(bf16_decode(bf16_encode(NAN))));
}

}  // namespace
}  // namespace nibble
