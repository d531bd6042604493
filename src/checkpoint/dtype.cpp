#include "checkpoint/dtype.h"

namespace nibble {

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1},       {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},         {DType::I16, "I16", 2},         {DType::U32, "U32", 4},
    {DType::I32, "I32", 4},         {DType::U64, "U64", 8},         {DType::I64, "I64", 8},
    {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},       {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},         {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
};
}  // namespace

const char* dtype_name(DType d) { return kDTypes[int(d)].name; }
size_t dtype_size(DType d) { return kDTypes[int(d)].size; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& info : kDTypes)
    if (name == info.name) return info.dtype;
  return std::nullopt;
}

}  // namespace nibble
