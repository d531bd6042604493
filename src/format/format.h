// The weight formats nibble knows, by the names `explain` prints.
#pragma once

#include <optional>
#include <string_view>

namespace nibble {

enum class Format {
  mxfp4,         // E2M1 codes, 32-element blocks with a UE8M0 scale (OCP MX)
  nvfp4,         // E2M1 codes, 16-element blocks with an E4M3 scale, f32 global scale
  fp8_block128,  // E4M3 codes, one scale per 128x128 tile (UE8M0 or F32)
  bf16,
  f32,
  int4,          // signed 4-bit codes, a BF16 scale per group (compressed-tensors pack-quantized; format/int4.h)
  int_index,     // integer tensors (tid2eid): not weights, never multiplied
};

// "mxfp4", "nvfp4", "fp8_block128", "bf16", "f32", "int4", "int".
const char* format_name(Format f);
std::optional<Format> parse_format(std::string_view name);

}  // namespace nibble
