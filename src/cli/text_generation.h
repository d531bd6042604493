// What `nibble run` and `nibble chat` share: the model + tokenizer pair, the
// sampling flags (defaults from generation_config.json, then the model
// card's temperature 1.0 / top_p 1.0), stop tokens (the model's EOS and
// generation_config.json's eos_token_id) and stop strings (--stop), and
// streaming generated text.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"
#include "model/model.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace nibble::cli {

// The model folder shipped in the repository, used when no MODEL_DIR is given.
std::string shipped_model_dir();

struct TextModel {
  std::string dir;
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;
};

// Flags every text command accepts (sampling, threads, backends).
std::vector<OptionSpec> text_generation_options();

// MODEL_DIR from the positional arguments (at most one) or the shipped model.
TextModel load_text_model(const ParsedArgs& args);

// Budget, stop tokens and sampler from the flags over generation_config.json.
GenerateOptions generation_options(const ParsedArgs& args, const TextModel& tm);

// What one streamed completion produced.
struct Completion {
  GenerateResult result;
  std::string text;         // the text shown: cut before a stop string, if one matched
  std::string stop_string;  // the --stop string that ended it ("" if none did)
};

// Generates from `prompt` (fed at the session's position) and writes the
// text to `out` as it comes, cut at the first of `stop_strings`.
Completion stream_completion(const TextModel& tm, Session& session, std::span<const int32_t> prompt,
                             const GenerateOptions& gen, const std::vector<std::string>& stop_strings,
                             std::FILE* out);

// One line on stderr: prompt and generation speed, and why generation ended.
void print_generation_stats(const Completion& c);

}  // namespace nibble::cli
