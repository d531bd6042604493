#include "format/format.h"

namespace nibble {

const char* format_name(Format f) {
  switch (f) {
    case Format::mxfp4: return "mxfp4";
    case Format::nvfp4: return "nvfp4";
    case Format::fp8_block128: return "fp8_block128";
    case Format::bf16: return "bf16";
    case Format::f32: return "f32";
    case Format::int4: return "int4";
    case Format::int_index: return "int";
  }
  return "?";
}

std::optional<Format> parse_format(std::string_view name) {
  for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16, Format::f32,
                   Format::int4, Format::int_index}) {
    if (name == format_name(f)) return f;
  }
  return std::nullopt;
}

}  // namespace nibble
