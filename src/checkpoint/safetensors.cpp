#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

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

// A non-negative integer that fits `limit`, or an error naming the field.
uint64_t as_count(const json& v, uint64_t limit, const std::string& path, const std::string& name,
                  const char* field) {
  if (!v.is_number_integer()) fail(path, ": tensor ", name, ": ", field, " must be integers");
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > limit) fail(path, ": tensor ", name, ": ", field, " value ", u, " is too large");
    return u;
  }
  int64_t s = v.get<int64_t>();
  if (s < 0) fail(path, ": tensor ", name, ": ", field, " value ", s, " is negative");
  if (uint64_t(s) > limit) fail(path, ": tensor ", name, ": ", field, " value ", s, " is too large");
  return uint64_t(s);
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                       const std::string& path) {
  if (!entry.is_object()) fail(path, ": tensor ", name, ": header entry is not an object");
  TensorInfo t;
  t.name = name;
  t.file = path;
  auto dt = entry.find("dtype");
  if (dt == entry.end() || !dt->is_string()) fail(path, ": tensor ", name, ": missing dtype");
  auto dtype = parse_dtype(dt->get<std::string>());
  if (!dtype) fail(path, ": tensor ", name, ": unknown dtype '", dt->get<std::string>(), "'");
  t.dtype = *dtype;

  auto sh = entry.find("shape");
  if (sh == entry.end() || !sh->is_array()) fail(path, ": tensor ", name, ": missing shape");
  // Products are kept below 2^62 so numel * dtype size cannot overflow.
  const uint64_t kLimit = uint64_t(1) << 62;
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t dim = as_count(d, kLimit, path, name, "shape");
    if (dim != 0 && numel > kLimit / dim)
      fail(path, ": tensor ", name, ": shape has more than 2^62 elements");
    numel *= dim;
    t.shape.push_back(int64_t(dim));
  }

  auto off = entry.find("data_offsets");
  if (off == entry.end() || !off->is_array() || off->size() != 2)
    fail(path, ": tensor ", name, ": data_offsets must be [begin, end]");
  uint64_t begin = as_count((*off)[0], kLimit, path, name, "data_offsets");
  uint64_t end = as_count((*off)[1], kLimit, path, name, "data_offsets");
  if (end < begin) fail(path, ": tensor ", name, ": data_offsets end ", end, " < begin ", begin);
  if (end > data_size)
    fail(path, ": tensor ", name, ": data_offsets [", begin, ", ", end,
         "] run past the end of the file (", data_size, " data bytes; truncated file?)");
  uint64_t expected = numel * dtype_size(t.dtype);
  if (end - begin != expected)
    fail(path, ": tensor ", name, ": holds ", end - begin, " bytes but ", dtype_name(t.dtype), " ",
         t.shape_str(), " needs ", expected);
  t.offset = begin;  // made absolute by the caller
  t.nbytes = end - begin;
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t avail, uint64_t file_size,
                                           const std::string& path) {
  if (file_size < 8 || avail < 8)
    fail(path, ": too small to be a safetensors file (", file_size, " bytes)");
  uint64_t n = read_u64_le(bytes);
  if (n > kMaxSafetensorsHeader)
    fail(path, ": header length ", n, " is absurdly large (not a safetensors file?)");
  if (n > file_size - 8)
    fail(path, ": header length ", n, " runs past the end of the file (", file_size,
         " bytes; truncated?)");
  if (n > avail - 8) fail(path, ": header needs ", n + 8, " bytes but only ", avail, " are readable");

  const char* text = reinterpret_cast<const char*>(bytes + 8);
  json doc = json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) fail(path, ": header is not valid JSON");
  if (!doc.is_object()) fail(path, ": header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, ": __metadata__ value '", m.key(), "' is not a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, data_size, path));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const auto& prev = h.tensors[i - 1];
    const auto& cur = h.tensors[i];
    if (cur.offset < prev.offset + prev.nbytes)
      fail(path, ": tensors ", prev.name, " and ", cur.name, " overlap (bytes ", cur.offset, "..",
           prev.offset + prev.nbytes, ")");
  }
  for (auto& t : h.tensors) t.offset += h.data_start;
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  header_ = parse_safetensors_header(map_.data(), map_.size(), map_.size(), path);
  for (auto& t : header_.tensors) t.data = map_.data() + t.offset;
}

}  // namespace nibble
