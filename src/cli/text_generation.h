// What `nibble run` and `nibble chat` share: the model + tokenizer pair, the
// sampling flags (defaults from generation_config.json, then the model
// card's temperature 1.0 / top_p 1.0), and streaming generated text.
#pragma once

#include <memory>
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

// One line on stderr: prompt and generation speed, and why generation ended.
void print_generation_stats(const GenerateResult& r);

}  // namespace nibble::cli
