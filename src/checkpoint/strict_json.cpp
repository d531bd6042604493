#include "checkpoint/strict_json.h"

#include <unordered_set>
#include <vector>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace nibble {

using nlohmann::json;

json parse_json_strict(std::string_view text, const std::string& what, int max_depth) {
  // nlohmann stops reading at a NUL byte as if the input ended there, so
  // "{}\0garbage" would parse. A raw NUL is never valid JSON (inside a
  // string it must be escaped), so it is rejected up front.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(what, ": not valid JSON (NUL byte at offset ", nul, ")");
  // One key set per open object, innermost last. A key event always belongs
  // to the innermost open object: arrays have no keys, and an object inside
  // an array pushes its own set.
  std::vector<std::unordered_set<std::string>> open_objects;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        // `depth` counts the containers already open around this one.
        if (depth > max_depth) fail(what, ": JSON nests deeper than ", max_depth + 1, " levels");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) fail(what, ": duplicate key \"", key, "\"");
        break;
      }
      default:
        break;
    }
    return true;  // keep everything: the caller validates the values
  };
  try {
    return json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    // parse_error (syntax, bad UTF-8) and out_of_range (a number beyond
    // double's range) both end here.
    fail(what, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace nibble
