#include "runtime/generation_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

namespace {

using nlohmann::json;

// A present, non-null field, or nullptr (HF writes null for "not set").
const json* field(const json& gc, const char* key) {
  auto it = gc.find(key);
  return it == gc.end() || it->is_null() ? nullptr : &*it;
}

// A finite number in [lo, hi] (lo excluded when `open_low`).
double number_in(const json& gc, const std::string& path, const char* key, double fallback, double lo, double hi,
                 bool open_low) {
  const json* v = field(gc, key);
  if (!v) return fallback;
  if (!v->is_number()) fail(path, ": field \"", key, "\" must be a number, got ", v->dump());
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (open_low && d == lo))
    fail(path, ": field \"", key, "\" must be in ", open_low ? "(" : "[", lo, ", ", hi, "], got ", v->dump());
  return d;
}

// An integer in [lo, hi]. A float is accepted only when it is a whole number
// in range (JSON writers print 50 as 50.0); the range is checked on the
// double, before any conversion, so 1e30 is an error and not undefined
// behaviour.
int64_t integer_in(const json& gc, const std::string& path, const char* key, int64_t fallback, int64_t lo,
                   int64_t hi) {
  const json* v = field(gc, key);
  if (!v) return fallback;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u <= uint64_t(hi) && int64_t(u) >= lo) return int64_t(u);
  } else if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i >= lo && i <= hi) return i;
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= double(lo) && d <= double(hi)) return int64_t(d);
  } else {
    fail(path, ": field \"", key, "\" must be an integer, got ", v->dump());
  }
  fail(path, ": field \"", key, "\" must be an integer in [", lo, ", ", hi, "], got ", v->dump());
}

}  // namespace

GenerationDefaults read_generation_config(const json* file, const std::string& path, int64_t vocab_size) {
  GenerationDefaults d;
  if (!file) return d;
  const json& gc = *file;
  d.source = path;
  if (!gc.is_object()) fail(path, ": not a JSON object");

  SamplingParams& s = d.sampling;
  s.temperature = float(number_in(gc, path, "temperature", s.temperature, 0, 1e6, false));
  s.top_p = float(number_in(gc, path, "top_p", s.top_p, 0, 1, /*open_low=*/true));
  s.top_k = integer_in(gc, path, "top_k", s.top_k, 0, int64_t(1) << 30);
  s.min_p = float(number_in(gc, path, "min_p", s.min_p, 0, 1, false));
  s.repetition_penalty = float(number_in(gc, path, "repetition_penalty", s.repetition_penalty, 0, 1e6, true));
  if (const json* v = field(gc, "do_sample")) {
    if (!v->is_boolean()) fail(path, ": field \"do_sample\" must be true or false, got ", v->dump());
    if (!v->get<bool>()) s.temperature = 0;  // greedy, as transformers reads it
  }
  // An id or a list of ids; each also stops generation, alongside
  // config.json's (GenerateOptions::use_model_eos).
  if (const json* v = field(gc, "eos_token_id")) {
    const json ids = v->is_array() ? *v : json::array({*v});
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
        fail(path, ": field \"eos_token_id\" must be a token id in [0, ", vocab_size, ") or a list of them, got ",
             v->dump());
      d.stop_tokens.push_back(id.get<int64_t>());
    }
  }
  return d;
}

}  // namespace nibble
