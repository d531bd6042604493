// A tiny Kimi K2-layout model that runs as text: fixture dsv3/kimi_int4's
// layers (DeepseekV3ForCausalLM, compressed-tensors INT4 experts) with its
// embedding and head regrown to the Kimi tokenizer fixture's 20,256 ids
// (tokenizer/kimi, written by tools/gen_kimi_tokenizer.py: o200k_base's
// lowest 20,000 ranks (Kimi's own file was not downloadable there), with Kimi's
// pre-tokenizer pattern and its special tokens at 20,000 .. 20,255), the
// tokenizer files beside it. For the CLI's and the
// server's Kimi tests (tests/model/kimi_text_test.cpp, tests/server/).
#pragma once

#include <cstdint>
#include <string>

namespace nibble::test {

constexpr int64_t kKimiVocab = 20256;  // 20,000 ranks + 256 special ids
constexpr int32_t kKimiBos = 20000;    // [BOS]
constexpr int32_t kKimiEos = 20001;    // [EOS]
constexpr int32_t kKimiImEnd = 20002;  // <|im_end|>: ends a chat reply

// Writes the checkpoint into `dir` (7.8 MB; seeded, so the same every time).
void write_kimi_text_model(const std::string& dir);

}  // namespace nibble::test
