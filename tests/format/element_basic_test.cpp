// Hand-checked values from formats.md's tables (the exhaustive, oracle-driven
// vectors live in element_vectors_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "format/element.h"
#include "util/error.h"

namespace nibble {

TEST(E2M1, RoundsTiesToEvenAndSaturates) {
  EXPECT_EQ(e2m1_encode(0.25f), 0x0);  // tie between 0 and 0.5 -> even code 0
  EXPECT_EQ(e2m1_encode(0.75f), 0x2);  // tie between 0.5 and 1 -> code 2 (1.0)
  EXPECT_EQ(e2m1_encode(5.0f), 0x6);   // tie between 4 and 6 -> code 6 (4.0)
  EXPECT_EQ(e2m1_encode(100.0f), 0x7);
  EXPECT_EQ(e2m1_encode(-100.0f), 0xF);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_THROW(e2m1_encode(NAN), Error);
}

TEST(E4M3, KnownCodes) {
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), 0.001953125f);  // 2^-9, smallest subnormal
  EXPECT_EQ(e4m3_encode(1000.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(-1000.0f), 0xFE);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
}

TEST(UE8M0, PowersOfTwo) {
  EXPECT_EQ(ue8m0_decode(127), 1.0f);
  EXPECT_EQ(ue8m0_encode(1.0f), 127);
  // 3 is the linear midpoint of 2 and 4. A mantissa-less type has no even
  // neighbour; ml_dtypes and torch both round such ties up (see element.h).
  EXPECT_EQ(ue8m0_encode(3.0f), 129);
  EXPECT_EQ(ue8m0_encode(2.9f), 128);
  EXPECT_THROW(ue8m0_encode(0.0f), Error);
}

}  // namespace nibble
