// A text-model fixture with a real tokenizer's vocabulary: a committed tiny
// checkpoint whose embedding and head are regrown at test time to the
// tokenizer's row count (seeded random BF16: too big to commit), written
// with its config.json next to the tokenizer's files. The text tests of
// gpt-oss (o200k tokenizer.json) and Kimi K2 (tiktoken.model) use it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nibble::test {

struct RegrownVocab {
  std::string fixture;                     // folder with config.json and model.safetensors
  std::string tokenizer;                   // folder holding `tokenizer_files`
  std::vector<std::string> tokenizer_files;
  int64_t vocab = 0;                       // rows of model.embed_tokens.weight and lm_head.weight
  uint32_t seed = 0;
  // The standard deviation of row `row` of tensor `name` (one of the two).
  std::function<float(const std::string& name, int64_t row)> row_scale;
  // config.json's fields to set besides vocab_size (bos / eos ids ...).
  nlohmann::json config;
};

// Writes the checkpoint into `dir`.
void write_regrown_vocab_model(const RegrownVocab& r, const std::string& dir);

}  // namespace nibble::test
