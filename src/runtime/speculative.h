// Speculative decoding with the model's own draft layer (DeepSeek-V4's MTP,
// docs/speculative.md). Each step:
//   1. drafts k tokens with the draft layer, chained: draft 1 reads the main
//      model's residual state of the last fed position and the last sampled
//      token; draft j + 1 reads the draft layer's own output state of draft j
//      and draft j's token;
//   2. verifies them in ONE main-model step over [last token, d_1 .. d_k]
//      with the logits of every row;
//   3. accepts the longest agreeing prefix plus the main model's own next
//      token: greedy, a draft is accepted iff it is the main model's argmax;
//      sampling, by rejection sampling (accept d with probability
//      min(1, p(d) / q(d)), else draw from normalize(max(0, p - q))), so
//      every token is distributed exactly as plain decoding's;
//   4. truncates the main state past the rejected rows and the draft state
//      past its chained rows, and queues the accepted rows' main-model states
//      for the draft layer, which reads them at the next step's draft 1.
// Greedy output is identical, token for token, to plain decoding, because a
// sequence's verify logits are bit-identical to its one-token decode logits
// (batch invariance, docs/sequences.md).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"
#include "nibble/engine.h"
#include "runtime/generate.h"

namespace nibble {

// Longest draft chain a step may use: the verify step feeds k + 1 tokens and
// rolling back k of them must stay within the states' truncation reach
// (LoadOptions::rollback_tokens, 16 by default).
constexpr int64_t kMaxDraftTokens = 15;

// The default: off. Measured (docs/speculative.md "When it pays", bench
// decode on the Flash-shaped model with this CPU's kernels): a verify step of
// k + 1 = 2 / 3 / 4 tokens costs 1.19 / 1.34 / 1.60 decode steps. That pays
// only where a draft is cheap against a step: at DeepSeek-V4-Flash depth (a
// draft ~0.12 of a step, estimated from bytes) k = 2 is predicted at 1.1-1.7x
// for acceptance 0.5-0.9, but on shallow models (a draft 0.6-1.1 of a step:
// the 2-layer Flash-shaped and the shipped model, measured) it loses, and no
// full-depth checkpoint with a trained MTP layer was at hand to confirm the
// acceptance. Opt in with --spec-draft-tokens 2 on full-depth checkpoints.
constexpr int64_t kDefaultDraftTokens = 0;
inline constexpr const char* kDefaultDraftWhy =
    "it is off by default: on this CPU a verify step of k + 1 tokens costs 1.2-1.6x a decode step, which pays "
    "(predicted 1.1-1.7x with k = 2) only on full-depth models where a draft is ~0.1 of a step, and loses on "
    "shallow ones (measured; docs/speculative.md).";

// `draft_tokens` must be in [1, kMaxDraftTokens] and not above the model's
// rollback reach (errors name --spec-draft-tokens); the model must have a
// draft layer (else the error is Model::draft_unavailable()).
void check_speculative(const Model& model, int64_t draft_tokens, int64_t rollback_tokens);

// generate() (runtime/generate.h: same options, stop rules, context limit,
// callback and result; the last sampled token is not fed) with speculative
// decoding, k = draft_tokens. The rejection sampler draws its uniforms from
// its own generator seeded by options.sampler.seed, so a seeded run is
// reproducible (but not the same tokens as plain sampling with that seed).
GenerateResult speculative_generate(const Model& model, ModelState& state, std::span<const int32_t> prompt,
                                    const GenerateOptions& options, int64_t draft_tokens,
                                    const std::function<bool(int32_t)>& on_token, SpecDecodeStats* stats);

// One rejection-sampling decision (exposed for tests): p and q are the target
// and draft distributions ((id, prob) lists as Sampler::distribution gives),
// `draft` was drawn from q; u1, u2 uniform in [0, 1). Returns the accepted
// draft, or the token drawn from normalize(max(0, p - q)) with u2, and sets
// *accepted.
int32_t rejection_sample(std::span<const std::pair<int32_t, double>> p, std::span<const std::pair<int32_t, double>> q,
                         int32_t draft, double u1, double u2, bool* accepted);

}  // namespace nibble
