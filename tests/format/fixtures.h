// Reads the oracle vectors written by tools/gen_format_vectors.py:
// tests/fixtures/format/manifest.json plus one raw little-endian .bin per
// array (layout in the generator's docstring). Header-only, test-side.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble::test {

inline std::string fixture_dir() { return NIBBLE_SOURCE_DIR "/tests/fixtures/format/"; }

inline const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    std::ifstream f(fixture_dir() + "manifest.json");
    if (!f) throw std::runtime_error("missing " + fixture_dir() + "manifest.json");
    return nlohmann::json::parse(f);
  }();
  return m;
}

template <class T> constexpr const char* dtype_name();
template <> constexpr const char* dtype_name<uint8_t>() { return "u8"; }
template <> constexpr const char* dtype_name<uint16_t>() { return "u16"; }
template <> constexpr const char* dtype_name<float>() { return "f32"; }

// A named array with its shape; its element type must match the manifest.
template <class T>
struct Array {
  std::vector<T> data;
  std::vector<int64_t> shape;
  int64_t dim(size_t i) const { return shape.at(i); }
  size_t size() const { return data.size(); }
  const T& operator[](size_t i) const { return data[i]; }
};

template <class T>
Array<T> load(const std::string& name) {
  const auto& entry = manifest().at("arrays").at(name);
  if (entry.at("dtype").get<std::string>() != dtype_name<T>())
    throw std::runtime_error("fixture " + name + " has dtype " + entry.at("dtype").get<std::string>());
  Array<T> a;
  int64_t count = 1;
  for (const auto& d : entry.at("shape")) {
    a.shape.push_back(d.get<int64_t>());
    count *= a.shape.back();
  }
  std::ifstream f(fixture_dir() + entry.at("file").get<std::string>(), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (int64_t(bytes.size()) != count * int64_t(sizeof(T)))
    throw std::runtime_error("fixture " + name + ": " + std::to_string(bytes.size()) +
                             " bytes, expected " + std::to_string(count * sizeof(T)));
  a.data.resize(count);
  std::memcpy(a.data.data(), bytes.data(), bytes.size());  // the host is little-endian (x86-64)
  return a;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bit equality, except that any NaN matches any NaN (NaN payloads differ
// between libraries and carry no meaning here).
inline bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return f32_bits(a) == f32_bits(b);
}

}  // namespace nibble::test
