#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint/strict_json.h"
#include "util/error.h"

namespace nibble {

using nlohmann::json;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Shapes, offsets and byte counts are kept below 2^62: no real tensor comes
// close, and it leaves headroom so that sums and products never wrap.
constexpr uint64_t kCountLimit = uint64_t(1) << 62;

// A non-negative integer no larger than kCountLimit, or an error naming the field.
uint64_t as_count(const json& v, const std::string& path, const std::string& name,
                  const char* field) {
  if (!v.is_number_integer())
    fail(path, ": tensor ", name, ": ", field, " must hold integers, not ", v.type_name());
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > kCountLimit) fail(path, ": tensor ", name, ": ", field, " value ", u, " is too large");
    return u;
  }
  int64_t s = v.get<int64_t>();
  if (s < 0) fail(path, ": tensor ", name, ": ", field, " value ", s, " is negative");
  if (uint64_t(s) > kCountLimit)
    fail(path, ": tensor ", name, ": ", field, " value ", s, " is too large");
  return uint64_t(s);
}

// The entry of one tensor: {"dtype": str, "shape": [int...], "data_offsets": [begin, end]}.
// Offsets stay relative to the data section here; the caller makes them absolute.
TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                       const std::string& path) {
  if (!entry.is_object())
    fail(path, ": tensor ", name, ": header entry is a JSON ", entry.type_name(), ", not an object");
  TensorInfo t;
  t.name = name;
  t.file = path;
  auto dt = entry.find("dtype");
  if (dt == entry.end()) fail(path, ": tensor ", name, ": missing \"dtype\"");
  if (!dt->is_string()) fail(path, ": tensor ", name, ": \"dtype\" is not a string");
  const auto& dtype_str = dt->get_ref<const std::string&>();
  auto dtype = parse_dtype(dtype_str);
  if (!dtype) fail(path, ": tensor ", name, ": unknown dtype \"", dtype_str, "\"");
  t.dtype = *dtype;

  auto sh = entry.find("shape");
  if (sh == entry.end()) fail(path, ": tensor ", name, ": missing \"shape\"");
  if (!sh->is_array()) fail(path, ": tensor ", name, ": \"shape\" is not an array");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t dim = as_count(d, path, name, "shape");
    if (dim != 0 && numel > kCountLimit / dim)
      fail(path, ": tensor ", name, ": shape has more than 2^62 elements");
    numel *= dim;
    t.shape.push_back(int64_t(dim));
  }
  const uint64_t elem = dtype_size(t.dtype);
  if (numel > kCountLimit / elem)
    fail(path, ": tensor ", name, ": ", dtype_name(t.dtype), " ", t.shape_str(),
         " would need more than 2^62 bytes");
  const uint64_t expected = numel * elem;

  auto off = entry.find("data_offsets");
  if (off == entry.end()) fail(path, ": tensor ", name, ": missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2)
    fail(path, ": tensor ", name, ": \"data_offsets\" must be [begin, end]");
  uint64_t begin = as_count((*off)[0], path, name, "data_offsets");
  uint64_t end = as_count((*off)[1], path, name, "data_offsets");
  if (end < begin) fail(path, ": tensor ", name, ": data_offsets end ", end, " < begin ", begin);
  if (end > data_size)
    fail(path, ": tensor ", name, ": data_offsets [", begin, ", ", end,
         "] run past the end of the file (", data_size, " data bytes; truncated file?)");
  if (end - begin != expected)
    fail(path, ": tensor ", name, ": holds ", end - begin, " bytes but ", dtype_name(t.dtype), " ",
         t.shape_str(), " needs ", expected);
  t.offset = begin;
  t.nbytes = end - begin;
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t avail, uint64_t file_size,
                                           const std::string& path) {
  if (avail > file_size) fail(path, ": ", avail, " readable bytes but the file has ", file_size);
  if (file_size < 8 || avail < 8)
    fail(path, ": too small to be a safetensors file (", file_size, " bytes)");
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxSafetensorsHeader)
    fail(path, ": header length ", n, " is absurdly large (not a safetensors file?)");
  if (n > file_size - 8)
    fail(path, ": header length ", n, " runs past the end of the file (", file_size,
         " bytes; truncated?)");
  if (n > avail - 8) fail(path, ": header needs ", n + 8, " bytes but only ", avail, " are readable");

  // A valid header nests: root object > tensor entry > shape array (depth 2).
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), size_t(n));
  json doc = parse_json_strict(text, path + ": header", /*max_depth=*/2);
  if (!doc.is_object()) fail(path, ": header is a JSON ", doc.type_name(), ", not an object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  h.tensors.reserve(doc.size());
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, ": __metadata__ is a JSON ", it->type_name(), ", not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, ": __metadata__ value \"", m.key(), "\" is not a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, data_size, path));
  }

  // Any overlap shows up between neighbours once sorted by start: if A
  // overlaps a later C, every tensor B starting between them starts inside A.
  // Zero-byte tensors own no bytes and overlap nothing, so they are skipped.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;  // deterministic order for equal ranges
  });
  const TensorInfo* prev = nullptr;
  for (const auto& cur : h.tensors) {
    if (cur.nbytes == 0) continue;
    if (prev && cur.offset < prev->offset + prev->nbytes)
      fail(path, ": tensors ", prev->name, " and ", cur.name, " overlap (data bytes ", cur.offset,
           "..", std::min(cur.offset + cur.nbytes, prev->offset + prev->nbytes), ")");
    prev = &cur;
  }
  for (auto& t : h.tensors) t.offset += h.data_start;
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  header_ = parse_safetensors_header(map_.data(), map_.size(), map_.size(), path);
  for (auto& t : header_.tensors) t.data = map_.data() + t.offset;
}

}  // namespace nibble
