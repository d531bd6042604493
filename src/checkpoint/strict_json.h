// Strict JSON for files whose structure we validate ourselves (safetensors
// headers, model.safetensors.index.json): nlohmann's parser silently keeps
// the last of two equal keys, which would let a header describe one tensor
// twice or an index map one tensor to two shards without anyone noticing.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace nibble {

// Parses `text`; throws nibble::Error starting with `what` (a file name,
// possibly with a part: "x.safetensors: header") when the text is not JSON,
// when an object repeats a key, or when containers nest deeper than
// `max_depth` (the root container is depth 0).
nlohmann::json parse_json_strict(std::string_view text, const std::string& what, int max_depth);

}  // namespace nibble
