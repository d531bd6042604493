#include "model/config_fields.h"

#include <cmath>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

const json* ConfigFields::find(const char* key) const {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void ConfigFields::bad(const char* key, const std::string& want) const {
  fail(path, ": field \"", prefix, key, "\" must be ", want);
}

int64_t ConfigFields::integer(const char* key, int64_t fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  bad(key, "an integer");
}

int64_t ConfigFields::positive(const char* key, int64_t fallback) const {
  const int64_t v = integer(key, fallback);
  if (v <= 0) fail(path, ": field \"", prefix, key, "\" must be positive, got ", v);
  return v;
}

double ConfigFields::number(const char* key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>())) bad(key, "a finite number");
  return v->get<double>();
}

bool ConfigFields::boolean(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(key, "true or false");
  return v->get<bool>();
}

std::string ConfigFields::string(const char* key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) bad(key, "a string");
  return v->get<std::string>();
}

}  // namespace nibble
