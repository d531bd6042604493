// A model's generation_config.json: the sampling defaults its publisher
// chose (temperature, top_p, top_k, do_sample, repetition_penalty) and extra
// stop tokens (eos_token_id). Validated as strictly as config.json: a field
// of the wrong type or out of range is an error naming the file and the
// field, never blamed on a flag the user did not give and never silently
// ignored. Fields nibble does not use (transformers_version, pad_token_id,
// ...) are left alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nibble::cli {

struct GenerationDefaults {
  std::string path;                    // the file read, "" when the model has none
  double temperature = 1.0;            // the model card's default; 0 after "do_sample": false
  double top_p = 1.0;
  int64_t top_k = 0;
  double min_p = 0;
  double repetition_penalty = 1.0;
  std::vector<int64_t> eos_token_ids;  // stop tokens besides config.json's
};

// Reads `dir`/generation_config.json if there is one (else the defaults).
// Token ids must lie in [0, vocab_size).
GenerationDefaults read_generation_config(const std::string& dir, int64_t vocab_size);

}  // namespace nibble::cli
