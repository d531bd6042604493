#include "support/kimi_text_model.h"

#include <filesystem>

#include "support/regrown_vocab.h"

namespace nibble::test {

void write_kimi_text_model(const std::string& dir) {
  const std::filesystem::path src(NIBBLE_SOURCE_DIR);
  RegrownVocab r;
  r.fixture = (src / "tests/fixtures/dsv3/kimi_int4").string();
  r.tokenizer = (src / "tests/fixtures/tokenizer/kimi").string();
  r.tokenizer_files = {"tiktoken.model", "tokenizer_config.json"};
  r.vocab = kKimiVocab;
  r.seed = 11;
  // The head's rows are of unit scale (the fixture's own are transformers'
  // init, 0.02): spread logits make greedy ties unlikely.
  r.row_scale = [](const std::string& name, int64_t) { return name == "lm_head.weight" ? 1.0f : 0.02f; };
  r.config = {{"bos_token_id", kKimiBos}, {"eos_token_id", kKimiEos}};
  write_regrown_vocab_model(r, dir);
}

}  // namespace nibble::test
