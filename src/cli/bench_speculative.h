// `nibble bench decode --spec-draft-tokens K`: what speculative decoding with
// the MTP draft costs and gains on this machine (bench_speculative.cpp says
// how each number is measured).
#pragma once

#include <cstdint>
#include <vector>

#include "nibble/engine.h"

namespace nibble::cli {

// Mean tokens per verify step when each of k drafts is accepted with
// probability a (independently, stopping at the first rejection), plus the
// main model's own token: (1 - a^(k+1)) / (1 - a).
double expected_tokens_per_step(int64_t k, double a);

// Prints the section (text, or one JSON object). Throws naming the flag when
// the model has no usable MTP layer. `text` (may be empty): the prompt's
// tokens instead of random ones (its first prompt_tokens), so acceptance is
// measured on real text.
void bench_speculative(Engine& engine, int64_t K, int64_t prompt_tokens, int64_t steps, int64_t new_tokens,
                       uint64_t seed, bool json, const std::vector<int32_t>& text);

}  // namespace nibble::cli
