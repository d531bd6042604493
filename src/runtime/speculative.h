// Speculative decoding with the model's own draft layer (DeepSeek-V4's or
// DeepSeek-V3's MTP, docs/speculative.md). Each step:
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
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/model.h"
#include "nibble/engine.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

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
// acceptance. The shipped model's trained layer (first drafts accepted 0.68
// greedy) still runs at 0.66-0.83x plain speed: a draft costs about a
// decode step on 6 layers. Opt in with --spec-draft-tokens 2 on full-depth
// checkpoints.
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

// ---- Speculation across a batch (the server) ---------------------------------
// generate() above runs one sequence's whole loop. The server's scheduler
// instead interleaves many sequences and prompt chunks in one Engine::step,
// so the loop is split into its parts, each batched over sequences:
//   capture  (inside Engine::step): keep the main model's states of the rows
//            the draft layer has not read yet;
//   draft    (Engine::draft): chained drafts for every sequence, one
//            Model::draft_step per draft position over all of them;
//   verify   (the caller's Engine::step, [last, d_1 .. d_k] with all logits,
//            together with anything else in the batch);
//   accept   (Engine::accept_drafts): rejection sampling against the
//            sequence's own sampler, then the rollback.
// A sequence's share is exactly what speculative_generate() does for it, so
// greedy output is plain decoding's, token for token.

// What a sequence keeps for it (Engine: a sequence after enable_draft()).
struct DraftTrack {
  std::unique_ptr<ModelState> state;         // the draft layer's own (Model::new_draft_state)
  // Main-model rows the draft layer has not read: consecutive positions,
  // at most draft_context() of them (older rows fall outside its window; a
  // full-attention layer reads them as they come: feed_pending_rows).
  std::vector<float> hidden;                 // [rows][hidden_width]
  std::vector<int32_t> next;                 // [rows - 1]: the token after each row but the last
  int64_t rows = 0;
  // The last draft round, for accept_drafts.
  std::vector<int32_t> drafts;               // [k]
  std::vector<std::vector<std::pair<int32_t, double>>> q;  // [k] the distributions they were drawn from
  uint64_t uniform = 0;                      // the rejection sampler's stream (splitmix64 state)
  bool seeded = false;                       // `uniform` seeded from the sampling seed
};

// A copy (Engine::fork): the draft state forked, the rest copied.
DraftTrack fork_track(const Model& model, const DraftTrack& track);
// Back to nothing read (a truncation the track cannot follow): drafting
// starts cold again from the rows fed next.
void reset_track(const Model& model, DraftTrack& track);

// Rows a step of n tokens should capture: min(n, this). Older rows fall
// outside the draft layer's window (a full-attention layer's "window" is the
// whole context: every row is captured).
int64_t capture_rows_wanted(const Model& model);
// Engine::step's part: a step fed `tokens` and wrote the main model's states
// of its last `captured` rows to `hidden` ([captured][hidden_width]).
void capture_rows(const Model& model, DraftTrack& track, std::span<const int32_t> tokens, const float* hidden,
                  int64_t captured);

// Whether the draft layer attends every row it was fed rather than a window
// (draft_context() covers the whole context: DeepSeek-V3's MTP layer).
bool draft_reads_all_rows(const Model& model);
// Engine::step's part after capture_rows for the step's drafting sequences.
// A full-attention draft layer needs every row, so rows are never dropped for
// it; instead a track holding more rows than a verify step captures (a prompt
// chunk, or plain decode steps) has all but its last row read by the draft
// state now, in one batched draft_step, so a long prompt fed in chunks holds
// one chunk's rows, not the whole prompt's. Windowed draft layers: nothing
// (capture_rows keeps their window).
void feed_pending_rows(const Model& model, std::span<DraftTrack* const> tracks);

// One sequence's share of a draft round.
struct DraftRequest {
  DraftTrack* track = nullptr;
  int32_t last = 0;                          // sampled, not yet fed: the token after the last pending row
  int64_t k = 0;                             // drafts wanted, 1 .. kMaxDraftTokens
  SamplerConfig sampler;                     // the target's; q uses its temperature and filters, no penalties
};

// Drafts for every request, chained, one draft_step per draft position over
// all of them. A track with no pending rows gets no drafts. Returns
// track->drafts (also kept in the track with their q for accept_drafts).
void draft_batch(const Model& model, std::span<DraftRequest> batch, SpecDecodeStats* stats);

// After the verify step fed [last, drafts...] at main position P (now
// P + k + 1) with `logits` [k + 1][vocab]: accepts by rejection sampling with
// `target` (the sequence's sampler; `history` the tokens fed, verify rows
// included, for repetition_penalty), truncates `state` to P + emitted and
// the track's pending rows to match. Returns the emitted tokens (1 .. k + 1;
// the last one is not fed).
std::vector<int32_t> accept_drafts(const Model& model, ModelState& state, DraftTrack& track, Sampler& target,
                                   std::span<const int32_t> history, const float* logits, SpecDecodeStats* stats);

}  // namespace nibble
