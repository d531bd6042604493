// Typed reads of one config.json object (or a nested one): a present field
// of the wrong type is an error naming it (with `prefix` for nested objects,
// "rope_parameters.factor"); null counts as absent, as transformers treats it.
// Every architecture's *_config.cpp reads its fields through this.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace nibble {

struct ConfigFields {
  const nlohmann::json& j;
  const std::string& path;  // config.json, for messages
  std::string prefix;       // "rope_parameters." for nested objects

  const nlohmann::json* find(const char* key) const;
  [[noreturn]] void bad(const char* key, const std::string& want) const;
  // Integers may be written as floats with an integral value (1.0).
  int64_t integer(const char* key, int64_t fallback) const;
  int64_t positive(const char* key, int64_t fallback) const;
  double number(const char* key, double fallback) const;  // finite
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
};

}  // namespace nibble
