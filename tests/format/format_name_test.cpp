// Format names as `explain` prints them, and their parsing.
#include <gtest/gtest.h>

#include <string>

#include "format/format.h"

namespace nibble {
namespace {

TEST(FormatName, EveryFormatParsesBackToItself) {
  const Format all[] = {Format::mxfp4, Format::nvfp4, Format::fp8_block128,
                        Format::bf16,  Format::f32,   Format::int_index};
  const char* names[] = {"mxfp4", "nvfp4", "fp8_block128", "bf16", "f32", "int"};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(std::string(format_name(all[i])), names[i]);
    ASSERT_TRUE(parse_format(names[i]).has_value()) << names[i];
    EXPECT_EQ(*parse_format(names[i]), all[i]);
  }
  EXPECT_FALSE(parse_format("MXFP4").has_value());
  EXPECT_FALSE(parse_format("").has_value());
  EXPECT_FALSE(parse_format("fp8").has_value());
}

}  // namespace
}  // namespace nibble
