// nibble's public API: load a model, create / fork / truncate / release
// sequences, run one forward step for a batch of them, sample, and generate
// with a streaming callback that can be cancelled. The command line and the
// server are written against this header only; nothing here exposes tensors,
// kernels or checkpoint internals.
//
// Threading: one Engine may be used from several threads; calls that touch
// sequences are serialised inside, and step() runs one batch at a time.
// cancel() may be called from any thread (a signal handler excepted) while
// generate() runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nibble {

struct EngineOptions {
  // Where the forward runs: "host" (this machine's CPU) or "cuda" / "cuda:N"
  // (a GPU of this machine; DeepSeek-V4 models).
  std::string device = "host";
  int threads = 0;                       // CPU threads; <= 0: all hardware threads
  std::string moe_backend = "auto";      // routed-experts kernel (as --moe-backend)
  std::string linear_backend = "auto";   // kernel of the other matrix ops (as --linear-backend)
  double bandwidth_gbps = 0;             // > 0: assume this bandwidth instead of measuring it
  int64_t step_tokens = 256;             // most tokens one forward step processes (activation memory)
  int64_t rollback_tokens = 16;          // truncation depth that needs no refeeding
  bool profile = false;                  // time every phase; the table goes to stderr when the Engine is destroyed
  bool check_weights = true;             // refuse weights with NaN scale codes at load (false: --no-check-weights)
  bool cuda_graphs = true;               // on a GPU, decode steps as CUDA graphs (false: --no-cuda-graphs)
  bool load_tokenizer = true;            // false: callers that tokenize themselves skip tokenizer.json
  // Sampling returns only ids below this: the caller's tokenizer range when
  // it loads its own (0: the Engine's tokenizer's range, or every id without one).
  int64_t sample_vocab = 0;
  // Called while weights bind and are checked: bytes done and in all (a
  // progress bar for large models). May be empty.
  std::function<void(uint64_t done, uint64_t total)> on_progress;
  // With device cuda: called as the weights are copied to the GPU (after
  // binding): bytes done and in all. May be empty.
  std::function<void(uint64_t done, uint64_t total)> on_upload_progress;
};

// A sequence's handle. Ids are never reused within one Engine.
using SeqId = int64_t;

struct SamplingParams;  // below

// One sequence's share of a step.
struct StepInput {
  SeqId seq = -1;
  std::span<const int32_t> tokens;       // fed at the sequence's position
  bool all_logits = false;               // logits of every token, else of the last only
  bool want_logits = true;               // false: advance the sequence, no logits
  // Non-null: the step also draws the sequence's next token from its last
  // row into *token, with the sequence's sampler (made from *sample the
  // first time, as sample()): the same token sample() would draw. Without
  // penalties it is drawn where the logits are computed (on a GPU only the
  // id crosses) and no logits come back; with them, here, and the logits
  // come back too. Needs want_logits and not all_logits.
  const SamplingParams* sample = nullptr;
  int32_t* token = nullptr;
};

// What one step read (Engine::step with a report; benchmarks).
struct StepReport {
  int64_t tokens = 0;            // fed, over all sequences
  int64_t forwards = 0;          // the step's split under the token budget
  uint64_t weight_bytes = 0;     // every matrix once per forward, routed experts once per distinct pick
  int64_t distinct_experts = 0;  // routed experts read, over layers and forwards
};

// Penalties apply first, to the raw logits, as transformers and vLLM do:
// repetition_penalty (transformers' RepetitionPenaltyLogitsProcessor) over
// every token of the sequence so far, fed or generated, each id once; then
// presence / frequency penalties (OpenAI's) over the tokens this sampler
// generated. Then temperature, top-k, top-p, min-p in that order.
struct SamplingParams {
  float temperature = 1.0f;              // 0 = greedy (argmax of the penalised logits; ties -> lowest id)
  int64_t top_k = 0;                     // 0 = off
  float top_p = 1.0f;                    // 1 = off
  float min_p = 0.0f;                    // 0 = off
  uint64_t seed = 0;
  float repetition_penalty = 1.0f;       // > 0; 1 = off
  float presence_penalty = 0.0f;         // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;        // [-2, 2]; 0 = off
};

// The model publisher's defaults: generation_config.json (validated when
// the model loads: a bad field is a load error naming the file and field)
// over the model card's temperature 1.0 / top_p 1.0.
struct GenerationDefaults {
  SamplingParams sampling;               // temperature (0 after "do_sample": false), top_k, top_p, min_p, repetition_penalty
  std::vector<int64_t> stop_tokens;      // its eos_token_id, besides eos_token_ids()
  std::string source;                    // the file read; "" when the model has none
};

struct GenerationParams {
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_tokens;      // besides the model's end-of-sequence ids
  bool use_model_eos = true;
  SamplingParams sampling;
  // Called for every sampled token with the logits it was drawn from
  // (penalties applied; before temperature and the filters) and the id
  // drawn; for log-probabilities. May be empty.
  std::function<void(const float* logits, int64_t vocab, int32_t chosen)> observe;
  // Speculative decoding with the model's MTP layer (docs/speculative.md):
  // tokens drafted per step, 0 = off, at most 15 and at most
  // EngineOptions::rollback_tokens. The output is distributed exactly as
  // without (greedy: the same tokens).
  int64_t draft_tokens = 0;
};

// How speculative decoding went (GenerationResult::spec).
struct SpecDecodeStats {
  int64_t steps = 0;                     // verify steps
  int64_t emitted = 0;                   // tokens they produced: accepted drafts + the main model's own
  std::vector<int64_t> drafted;          // [k] drafts at draft position j (generate(): those checked; the server: every one proposed)
  std::vector<int64_t> accepted;         // [k] of which accepted
  int64_t draft_forwards = 0;            // forwards of the draft layer (one per draft)
  double draft_seconds = 0;              // spent in them
  double verify_seconds = 0;             // spent in the verify steps (main model, k + 1 tokens)
  // Tokens per verify step (1 + accepted drafts): the mean accepted length.
  double mean_accepted_length() const { return steps ? double(emitted) / double(steps) : 0.0; }
  void add(const SpecDecodeStats& o) {
    steps += o.steps;
    emitted += o.emitted;
    draft_forwards += o.draft_forwards;
    draft_seconds += o.draft_seconds;
    verify_seconds += o.verify_seconds;
    if (drafted.size() < o.drafted.size()) drafted.resize(o.drafted.size(), 0);
    if (accepted.size() < o.accepted.size()) accepted.resize(o.accepted.size(), 0);
    for (size_t j = 0; j < o.drafted.size(); ++j) drafted[j] += o.drafted[j];
    for (size_t j = 0; j < o.accepted.size(); ++j) accepted[j] += o.accepted[j];
  }
};

// One sequence's share of Engine::draft.
struct DraftInput {
  SeqId seq = -1;
  int32_t last = 0;                      // the sampled token not yet fed
  int64_t tokens = 0;                    // drafts wanted: 1 .. 15 (and within the context and budget)
  SamplingParams sampling;               // the sequence's (its draft distribution uses the temperature and filters)
};

enum class FinishReason { stop_token, max_tokens, callback, cancelled, context_full };
const char* finish_reason_name(FinishReason r);

struct GenerationResult {
  std::vector<int32_t> tokens;           // generated, the stop token included if one ended it
  FinishReason reason = FinishReason::max_tokens;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  SpecDecodeStats spec;                  // empty unless draft_tokens > 0
};

// The architectures (config.json's architectures[0]) Engine::load runs.
std::vector<std::string> runnable_architectures();

class Engine {
 public:
  // Opens a model folder (config.json, safetensors shards, tokenizer.json if
  // present). Throws nibble::Error (a std::runtime_error) naming the file or
  // field at fault.
  static std::unique_ptr<Engine> load(const std::string& model_dir, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The model.
  const std::string& architecture() const;
  int64_t vocab_size() const;
  int64_t max_context() const;
  int64_t bos_token_id() const;                   // -1 when none
  const std::vector<int64_t>& eos_token_ids() const;
  int64_t step_token_budget() const;
  // How far truncate() goes back without refeeding (EngineOptions::rollback_tokens).
  int64_t rollback_tokens() const;
  int threads() const;                            // CPU threads the forward uses (on a GPU: the host's share)
  // Where the forward runs: "host" or "cuda:N", and that device in words.
  const std::string& device() const;
  const std::string& device_description() const;
  // The read bandwidth of the memory the weights stream from, measured now
  // (this machine's DRAM with threads() threads, or the GPU's memory): what
  // benchmarks set decode speed against.
  double measure_bandwidth_gbps() const;
  const GenerationDefaults& generation_defaults() const;
  // The kernels bound for an op group, for logs: "moe" (routed experts) or
  // "linear" (every other matrix op); registry names, comma-separated.
  std::string kernels(const std::string& op_group) const;
  // Speculative decoding's draft (the MTP layer): "" when the model has one,
  // else why not (missing, partial or misshapen mtp.* tensors, ...).
  std::string draft_unavailable() const;
  // What the model's backend reports of the steps so far (on a GPU: how
  // many decode steps ran as CUDA graphs and the host's time per graph);
  // empty when nothing.
  std::string backend_report() const;

  // Text (needs tokenizer.json; throws otherwise).
  bool has_tokenizer() const;
  std::vector<int32_t> tokenize(const std::string& text, bool allow_special = true) const;
  std::string detokenize(std::span<const int32_t> ids, bool skip_special = false) const;
  // One token's raw bytes (detokenize() makes text of them, replacing a
  // partial UTF-8 character with U+FFFD); an id outside the vocabulary throws.
  std::string token_bytes(int32_t id) const;

  // Sequences. Every call naming an id that was never created, or was
  // released, throws an error naming it.
  SeqId create();
  SeqId fork(SeqId seq);                          // an independent copy at the same position
  void truncate(SeqId seq, int64_t position);     // back to `position` (0 .. position(seq))
  void release(SeqId seq);
  int64_t position(SeqId seq) const;
  uint64_t memory_bytes(SeqId seq) const;         // memory its state holds, host or GPU (token history included)
  // The tokens fed so far, in order (what repetition_penalty covers).
  std::vector<int32_t> tokens(SeqId seq) const;
  size_t live_sequences() const;

  // One forward step over the batch (any mix of prefill chunks and single
  // decode tokens). Returns, per input in order, its logits [rows][vocab]
  // (rows = tokens.size() with all_logits, else 1; empty when no logits
  // were wanted or no token was fed). A sequence's logits are bit-identical
  // whatever else is in the batch. Every input is checked first: a bad one
  // (unknown id, an id listed twice, a token outside the vocabulary, past
  // the context) throws naming the sequence and the value, and no sequence
  // has changed. With `report`, also counts the weight bytes the step read
  // (routing each layer's tokens once more to count distinct experts: time
  // steps without it).
  std::vector<std::vector<float>> step(std::span<const StepInput> batch, StepReport* report = nullptr);

  // Samples a token from logits [vocab] with the sequence's own sampler,
  // made from `params` the first time it samples or after reseed(): its
  // generator is seeded by params.seed and its presence / frequency
  // penalties count the tokens it has drawn since. Settings out of range
  // throw naming the field.
  int32_t sample(SeqId seq, const float* logits, const SamplingParams& params);
  void reseed(SeqId seq);

  // Feeds `prompt` at the sequence's position, then samples and feeds one
  // token at a time until a stop token, the budget, the context's end,
  // on_token returning false (callback) or cancel(seq) (cancelled). The last
  // sampled token is not fed (the sequence ends one short of the tokens).
  // A sampler of its own (seeded by params.sampling.seed; presence and
  // frequency penalties count this call's tokens); repetition_penalty covers
  // the sequence's earlier tokens too.
  GenerationResult generate(SeqId seq, std::span<const int32_t> prompt, const GenerationParams& params,
                            const std::function<bool(int32_t)>& on_token = {});
  // Makes a running (or the next) generate() on `seq` stop before its next token.
  void cancel(SeqId seq);

  // Speculative decoding across a batch, for callers that run their own
  // step loop (the server; docs/speculative.md "In serve"). generate() with
  // draft_tokens needs none of this.
  //  1. enable_draft(seq): from now on the steps of `seq` keep the main
  //     model's states its MTP layer reads (throws naming why when the model
  //     has no usable one). fork() copies that; truncate() restarts it cold.
  //  2. draft(batch): k chained drafts per sequence, one draft forward per
  //     draft position over the whole batch. A sequence that has fed nothing
  //     since enable_draft gets none.
  //  3. step() with [last, drafts...] and all_logits (prompt chunks and other
  //     sequences may share the step).
  //  4. accept_drafts(seq, those logits, params): rejection sampling with the
  //     sequence's own sampler (as sample(): made from `params` the first
  //     time), the state rolled back past the rejected drafts. Returns the
  //     emitted tokens (1 .. k + 1); the last one is not fed. Greedy, they
  //     are exactly what sample() one step at a time would have given.
  void enable_draft(SeqId seq);
  std::vector<std::vector<int32_t>> draft(std::span<const DraftInput> batch, SpecDecodeStats* stats = nullptr);
  std::vector<int32_t> accept_drafts(SeqId seq, const float* logits, const SamplingParams& params,
                                     SpecDecodeStats* stats = nullptr);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nibble
