// safetensors dtypes: the storage type of a tensor, as named in the header.
// The *format* (what the bytes mean, e.g. MXFP4 in an I8 tensor) is decided
// by checkpoint/detect, not here.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace nibble {

enum class DType {
  BOOL, U8, I8, U16, I16, U32, I32, U64, I64,
  F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0,
};

const char* dtype_name(DType d);  // "F8_E4M3"
size_t dtype_size(DType d);       // bytes per element
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace nibble
