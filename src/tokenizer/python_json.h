// JSON written the way Python's json.dumps(value, ensure_ascii=False) writes
// it, which is what chat templates' `tojson` (transformers' override) emits:
// ", " and ": " separators, non-ASCII kept, control characters escaped.
// An ordered_json keeps a Python dict's insertion order; a json (std::map)
// gives sorted keys, as json.dumps(sort_keys=True) or a deep-sorted dict.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace nibble {

std::string python_json(const nlohmann::json& v);
std::string python_json(const nlohmann::ordered_json& v);

}  // namespace nibble
