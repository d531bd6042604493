// A model's generation_config.json: the sampling defaults its publisher
// chose (temperature, top_p, top_k, do_sample, repetition_penalty) and extra
// stop tokens (eos_token_id). Validated as strictly as config.json: a field
// of the wrong type or out of range is an error naming the file and the
// field, never blamed on a flag the user did not give and never silently
// ignored. Fields nibble does not use (transformers_version, pad_token_id,
// ...) are left alone.
//
// The file is parsed once, by Checkpoint::open; this reads the fields.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "nibble/engine.h"

namespace nibble {

// `gc` is the parsed generation_config.json (null when the model has none),
// `path` its file name for messages. Token ids must lie in [0, vocab_size).
GenerationDefaults read_generation_config(const nlohmann::json* gc, const std::string& path, int64_t vocab_size);

}  // namespace nibble
