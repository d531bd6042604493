// The public Engine (include/nibble/engine.h) over the model, tokenizer and
// sampler layers. Sequences live in a map from id to state; an id is
// resolved under the engine's mutex, and a sequence in use by a running step
// or generate() is marked busy so that release() or a second concurrent use
// is refused instead of freeing memory under a running forward.
#include "nibble/engine.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/checkpoint.h"
#include "device/cuda_device.h"
#include "device/device.h"
#include "model/registry.h"
#include "runtime/generate.h"
#include "runtime/generation_config.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop_token: return "stop_token";
    case FinishReason::max_tokens: return "max_tokens";
    case FinishReason::callback: return "callback";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::context_full: return "context_full";
  }
  return "?";
}

namespace {

struct Sequence {
  std::unique_ptr<ModelState> state;
  std::vector<int32_t> history;       // every token fed, in order (repetition_penalty's context)
  std::unique_ptr<Sampler> sampler;   // made at the first sample()
  std::unique_ptr<DraftTrack> draft;  // after enable_draft(): what the MTP layer reads (runtime/speculative.h)
  std::atomic<bool> cancel{false};
  bool busy = false;                  // a step or generate() is using it
};

SamplerConfig sampler_config(const SamplingParams& p, int64_t vocab_limit) {
  SamplerConfig c;
  c.vocab_limit = vocab_limit;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.seed = p.seed;
  c.repetition_penalty = p.repetition_penalty;
  c.presence_penalty = p.presence_penalty;
  c.frequency_penalty = p.frequency_penalty;
  return c;
}

}  // namespace

struct Engine::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t rollback_tokens = 16;       // EngineOptions::rollback_tokens (the reach of speculative rollback)
  GenerationDefaults defaults;
  // The ids sampling may return: the tokenizer's id range when there is one
  // (SamplerConfig::vocab_limit), else every row of the head (0).
  int64_t sample_vocab() const {
    if (sample_vocab_option > 0) return sample_vocab_option;
    return tokenizer ? int64_t(tokenizer->vocab_size()) : 0;
  }
  int64_t sample_vocab_option = 0;  // EngineOptions::sample_vocab
  mutable std::mutex mu;
  std::map<SeqId, std::unique_ptr<Sequence>> seqs;
  SeqId next_id = 0;

  Sequence& find(SeqId id) const {  // callers hold mu
    auto it = seqs.find(id);
    if (it == seqs.end())
      fail("sequence ", id, id >= 0 && id < next_id ? " was released" : " does not exist");
    return *it->second;
  }
  // Marks `ids` busy for the lifetime of the guard (each must exist and be idle).
  struct Busy {
    Impl& impl;
    std::vector<Sequence*> held;
    Busy(Impl& i, std::span<const SeqId> ids) : impl(i) {
      std::lock_guard<std::mutex> lock(impl.mu);
      for (SeqId id : ids) {
        Sequence& s = impl.find(id);
        if (s.busy) {
          for (Sequence* h : held) h->busy = false;
          fail("sequence ", id, std::find(held.begin(), held.end(), &s) != held.end()
                                    ? " appears twice in one step"
                                    : " is in use by a running step");
        }
        s.busy = true;
        held.push_back(&s);
      }
    }
    ~Busy() {
      std::lock_guard<std::mutex> lock(impl.mu);
      for (Sequence* h : held) h->busy = false;
    }
  };
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string& model_dir, const EngineOptions& options) {
  LoadOptions lo;
  lo.device = options.device;
  lo.threads = options.threads;
  lo.plan.moe_backend = options.moe_backend;
  lo.plan.linear_backend = options.linear_backend;
  lo.bandwidth_gbps = options.bandwidth_gbps;
  lo.max_chunk_tokens = options.step_tokens;
  lo.rollback_tokens = options.rollback_tokens;
  lo.profile = options.profile;
  lo.skip_weight_check = !options.check_weights;
  lo.cuda_graphs = options.cuda_graphs;
  lo.on_progress = options.on_progress;
  lo.on_upload_progress = options.on_upload_progress;
  auto impl = std::make_unique<Impl>();
  std::unique_ptr<Checkpoint> ck = Checkpoint::open(model_dir);
  // Read before the checkpoint moves into the model; validated against the
  // vocabulary once the model has parsed its config.
  const std::unique_ptr<nlohmann::json> gc =
      ck->generation_config() ? std::make_unique<nlohmann::json>(*ck->generation_config()) : nullptr;
  const std::string gc_path = ck->file_path("generation_config.json");
  impl->model = load_model(std::move(ck), lo);
  if (impl->model->plan().device.kind == DeviceKind::cuda) {
    // The CUDA backend repacks and uploads each weight the first time a
    // step uses it (every expert of a layer at once): one token through a
    // scratch sequence now, so that loading pays for it, not the first
    // request (nor a benchmark's first timed step). The MTP layer's
    // weights wait for the first draft.
    auto scratch = impl->model->new_state();
    const int32_t first_id[1] = {0};
    impl->model->forward(*scratch, first_id, nullptr, false);
  }
  impl->rollback_tokens = options.rollback_tokens;
  impl->sample_vocab_option = options.sample_vocab;
  impl->defaults = read_generation_config(gc.get(), gc_path, impl->model->vocab_size());
  // tokenizer.json, else Kimi's tiktoken.model (Tokenizer::file_in).
  const std::string tok = Tokenizer::file_in(model_dir);
  if (options.load_tokenizer && !tok.empty()) {
    impl->tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_model_dir(model_dir));
    if (int64_t(impl->tokenizer->vocab_size()) > impl->model->vocab_size())
      fail(tok, ": the tokenizer has ", impl->tokenizer->vocab_size(), " ids but the model's vocab_size is ",
           impl->model->vocab_size());
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const std::string& Engine::architecture() const { return impl_->model->architecture(); }
int64_t Engine::vocab_size() const { return impl_->model->vocab_size(); }
int64_t Engine::max_context() const { return impl_->model->max_context(); }
int64_t Engine::bos_token_id() const { return impl_->model->bos_token_id(); }
const std::vector<int64_t>& Engine::eos_token_ids() const { return impl_->model->eos_token_ids(); }
int64_t Engine::step_token_budget() const { return impl_->model->step_token_budget(); }
int64_t Engine::rollback_tokens() const { return impl_->rollback_tokens; }
int Engine::threads() const {
  const Device& d = impl_->model->plan().device;
  // A GPU plan's cores are its SMs; the host side of its steps is one thread.
  return d.kind == DeviceKind::cpu ? d.cores : 1;
}
const std::string& Engine::device() const { return impl_->model->plan().device.name; }
const std::string& Engine::device_description() const { return impl_->model->plan().device.description; }
double Engine::measure_bandwidth_gbps() const {
  const Device& d = impl_->model->plan().device;
  if (d.kind == DeviceKind::cuda) return cuda_read_bandwidth_gbps(cuda_device_index(d.name), uint64_t(4) << 30);
  return measure_read_bandwidth_gbps(d.cores);
}

std::string Engine::backend_report() const { return impl_->model->backend_report(); }

std::string Engine::draft_unavailable() const {
  return impl_->model->has_draft() ? std::string() : impl_->model->draft_unavailable();
}

const GenerationDefaults& Engine::generation_defaults() const { return impl_->defaults; }

std::string Engine::kernels(const std::string& op_group) const {
  if (op_group != "moe" && op_group != "linear") fail("unknown op group \"", op_group, "\" (moe or linear)");
  const Op op = op_group == "moe" ? Op::moe : Op::linear;
  std::set<std::string> names;
  for (const auto& g : impl_->model->plan().groups)
    if (g.has_op && g.op == op && g.selection.chosen) names.insert(g.selection.chosen->name);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

std::vector<std::string> runnable_architectures() {
  std::vector<std::string> out;
  for (const auto& e : model_registry()) out.push_back(e.architecture);
  return out;
}

bool Engine::has_tokenizer() const { return impl_->tokenizer != nullptr; }

std::vector<int32_t> Engine::tokenize(const std::string& text, bool allow_special) const {
  if (!impl_->tokenizer) fail("the model folder has no tokenizer.json or tiktoken.model");
  return impl_->tokenizer->encode(text, allow_special);
}

std::string Engine::detokenize(std::span<const int32_t> ids, bool skip_special) const {
  if (!impl_->tokenizer) fail("the model folder has no tokenizer.json or tiktoken.model");
  return impl_->tokenizer->decode(ids, skip_special);
}

std::string Engine::token_bytes(int32_t id) const {
  if (!impl_->tokenizer) fail("the model folder has no tokenizer.json or tiktoken.model");
  return impl_->tokenizer->token_bytes(id);
}

SeqId Engine::create() {
  auto s = std::make_unique<Sequence>();
  s->state = impl_->model->new_state();
  std::lock_guard<std::mutex> lock(impl_->mu);
  const SeqId id = impl_->next_id++;
  impl_->seqs.emplace(id, std::move(s));
  return id;
}

SeqId Engine::fork(SeqId seq) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  auto s = std::make_unique<Sequence>();
  s->state = impl_->model->fork(*busy.held[0]->state);
  s->history = busy.held[0]->history;
  if (busy.held[0]->draft)
    s->draft = std::make_unique<DraftTrack>(fork_track(*impl_->model, *busy.held[0]->draft));
  std::lock_guard<std::mutex> lock(impl_->mu);
  const SeqId id = impl_->next_id++;
  impl_->seqs.emplace(id, std::move(s));
  return id;
}

void Engine::truncate(SeqId seq, int64_t position) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  try {
    impl_->model->truncate(*busy.held[0]->state, position);
  } catch (const Error& e) {
    fail("sequence ", seq, ": ", e.what());
  }
  busy.held[0]->history.resize(size_t(position));
  // The pending rows are of positions now gone, and the draft state read
  // them: drafting restarts from the rows fed next.
  if (busy.held[0]->draft) reset_track(*impl_->model, *busy.held[0]->draft);
}

void Engine::release(SeqId seq) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Sequence& s = impl_->find(seq);
  if (s.busy) fail("sequence ", seq, " is in use by a running step and cannot be released");
  impl_->seqs.erase(seq);
}

int64_t Engine::position(SeqId seq) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->find(seq).state->position();
}

uint64_t Engine::memory_bytes(SeqId seq) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Sequence& s = impl_->find(seq);
  return s.state->memory_bytes() + s.history.capacity() * sizeof(int32_t);
}

std::vector<int32_t> Engine::tokens(SeqId seq) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->find(seq).history;
}

size_t Engine::live_sequences() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seqs.size();
}

std::vector<std::vector<float>> Engine::step(std::span<const StepInput> batch, StepReport* report) {
  std::vector<SeqId> ids;
  for (const StepInput& in : batch) ids.push_back(in.seq);
  Impl::Busy busy(*impl_, ids);
  const int64_t V = vocab_size();
  std::vector<std::vector<float>> out(batch.size());
  std::vector<SeqStep> steps(batch.size());
  std::vector<std::vector<float>> hidden(batch.size());  // drafting sequences: the rows their MTP layer reads
  const int64_t capture = impl_->model->has_draft() ? capture_rows_wanted(*impl_->model) : 0;
  // Inputs that draw their token in the step (StepInput::sample): on the
  // backend (draws[i] set) or here from the logits. The samplers' stream
  // positions as they were, so that a failed step leaves their streams
  // untouched too (only next_draw() below moves a sampler before the step
  // succeeds: its penalty counts change in take_draws, after it).
  std::vector<DrawParams> draws(batch.size());
  std::vector<int32_t> drawn(batch.size(), -1);
  std::vector<std::optional<uint64_t>> before(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepInput& in = batch[i];
    if (!in.sample) continue;
    if (!in.token || !in.want_logits || in.all_logits || in.tokens.empty())
      fail("sequence ", in.seq, ": a token drawn in the step needs tokens fed, want_logits, not all_logits and a "
           "place for the token");
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& sq = *busy.held[i];
    if (batch[i].sample && !sq.sampler)
      sq.sampler = std::make_unique<Sampler>(sampler_config(*batch[i].sample, impl_->sample_vocab()));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepInput& in = batch[i];
    SeqStep& s = steps[i];
    s.state = busy.held[i]->state.get();
    s.tokens = in.tokens;
    s.id = in.seq;
    s.rows = !in.want_logits || in.tokens.empty() ? LogitRows::none : in.all_logits ? LogitRows::all : LogitRows::last;
    Sampler* sampler = in.sample ? busy.held[i]->sampler.get() : nullptr;
    if (sampler) before[i] = sampler->stream_position();
    if (sampler && sampler->draws_on_backend()) {
      draws[i] = sampler->next_draw();
      s.draw = &draws[i];
      s.drawn = &drawn[i];
    } else if (s.rows != LogitRows::none) {
      out[i].resize(size_t((s.rows == LogitRows::all ? int64_t(in.tokens.size()) : 1) * V));
      s.logits = out[i].data();
    }
    if (busy.held[i]->draft && !in.tokens.empty()) {
      const int64_t n = int64_t(in.tokens.size()), c = std::min(n, capture);
      hidden[i].resize(size_t(c * impl_->model->hidden_width()));
      s.hidden = hidden[i].data();
      s.hidden_first = n - c;
    }
  }
  // Every input is checked before the model changes any state, so on an
  // error the histories stay in step with the states.
  auto record = [&] {
    std::vector<DraftTrack*> captured;
    for (size_t i = 0; i < batch.size(); ++i) {
      busy.held[i]->history.insert(busy.held[i]->history.end(), batch[i].tokens.begin(), batch[i].tokens.end());
      if (!hidden[i].empty()) {
        capture_rows(*impl_->model, *busy.held[i]->draft, batch[i].tokens, hidden[i].data(),
                     int64_t(hidden[i].size()) / impl_->model->hidden_width());
        captured.push_back(busy.held[i]->draft.get());
      }
    }
    feed_pending_rows(*impl_->model, captured);
  };
  // After the step (the history then holds what was fed, as sample() sees
  // it): each drawn token to its sampler and its caller.
  auto take_draws = [&] {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].sample) continue;
      Sequence& sq = *busy.held[i];
      if (steps[i].draw) {
        sq.sampler->record(drawn[i]);
        *batch[i].token = drawn[i];
      } else {
        *batch[i].token = sq.sampler->sample(out[i].data(), V, sq.history);
      }
    }
  };
  auto run = [&](StepStats* stats) {
    try {
      impl_->model->step(steps, stats);
    } catch (...) {
      for (size_t i = 0; i < batch.size(); ++i)
        if (before[i]) busy.held[i]->sampler->rewind_stream(*before[i]);
      throw;
    }
    record();
    take_draws();
  };
  if (!report) {
    run(nullptr);
    return out;
  }
  StepStats stats;
  run(&stats);
  report->tokens = stats.tokens;
  report->forwards = stats.sub_steps;
  report->weight_bytes = stats.weight_bytes;
  report->distinct_experts = stats.distinct_experts;
  return out;
}

int32_t Engine::sample(SeqId seq, const float* logits, const SamplingParams& params) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  Sequence& s = *busy.held[0];
  if (!s.sampler) s.sampler = std::make_unique<Sampler>(sampler_config(params, impl_->sample_vocab()));
  return s.sampler->sample(logits, vocab_size(), s.history);
}

void Engine::reseed(SeqId seq) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Sequence& s = impl_->find(seq);
  s.sampler.reset();
  if (s.draft) s.draft->seeded = false;
}

GenerationResult Engine::generate(SeqId seq, std::span<const int32_t> prompt, const GenerationParams& params,
                                  const std::function<bool(int32_t)>& on_token) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  Sequence& s = *busy.held[0];
  GenerateOptions g;
  g.max_new_tokens = params.max_new_tokens;
  g.stop_tokens = params.stop_tokens;
  g.use_model_eos = params.use_model_eos;
  g.sampler = sampler_config(params.sampling, impl_->sample_vocab());
  g.sampler.observe = params.observe;
  g.sampler.context = s.history;
  g.sampler.context.insert(g.sampler.context.end(), prompt.begin(), prompt.end());
  // The tokens generate() fed after the prompt are among those it passed to
  // on_token (a stop token is never fed).
  std::vector<int32_t> passed;
  // The state moves into a Session for the loop and back afterwards, also
  // when the loop throws; the history then gains what the state was fed.
  Session session(*impl_->model, std::move(s.state));
  struct Restore {
    Sequence& s;
    Session& session;
    std::span<const int32_t> prompt;
    const std::vector<int32_t>& passed;
    ~Restore() {
      s.state = session.release_state();
      size_t fed = size_t(s.state->position()) - s.history.size();
      const size_t from_prompt = std::min(fed, prompt.size());
      s.history.insert(s.history.end(), prompt.begin(), prompt.begin() + std::ptrdiff_t(from_prompt));
      fed -= from_prompt;
      s.history.insert(s.history.end(), passed.begin(), passed.begin() + std::ptrdiff_t(std::min(fed, passed.size())));
    }
  } restore{s, session, prompt, passed};
  bool cancelled = s.cancel.exchange(false);
  GenerationResult r;
  if (cancelled) {
    r.reason = FinishReason::cancelled;
    r.prompt_tokens = int64_t(prompt.size());
    return r;
  }
  auto callback = [&](int32_t id) {
    passed.push_back(id);
    if (on_token && !on_token(id)) return false;
    if (s.cancel.exchange(false)) {
      cancelled = true;
      return false;
    }
    return true;
  };
  GenerateResult got;
  if (params.draft_tokens != 0) {
    // Speculative decoding (runtime/speculative.h) on the session's state;
    // the history is kept by Restore the same way.
    check_speculative(*impl_->model, params.draft_tokens, impl_->rollback_tokens);
    got = speculative_generate(*impl_->model, session.state(), prompt, g, params.draft_tokens, callback, &r.spec);
  } else {
    got = nibble::generate(session, prompt, g, callback);
  }
  r.tokens = std::move(got.tokens);
  r.prompt_tokens = got.prompt_tokens;
  r.prefill_seconds = got.prefill_seconds;
  r.decode_seconds = got.decode_seconds;
  switch (got.reason) {
    case StopReason::stop_token: r.reason = FinishReason::stop_token; break;
    case StopReason::max_tokens: r.reason = FinishReason::max_tokens; break;
    case StopReason::context_full: r.reason = FinishReason::context_full; break;
    case StopReason::callback: r.reason = cancelled ? FinishReason::cancelled : FinishReason::callback; break;
  }
  return r;
}

void Engine::cancel(SeqId seq) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->find(seq).cancel = true;
}

void Engine::enable_draft(SeqId seq) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  if (!impl_->model->has_draft())
    fail("speculative decoding needs the model's MTP layer: ", impl_->model->draft_unavailable());
  Sequence& s = *busy.held[0];
  if (s.draft) return;
  s.draft = std::make_unique<DraftTrack>();
  reset_track(*impl_->model, *s.draft);
}

std::vector<std::vector<int32_t>> Engine::draft(std::span<const DraftInput> batch, SpecDecodeStats* stats) {
  std::vector<SeqId> ids;
  for (const DraftInput& in : batch) ids.push_back(in.seq);
  Impl::Busy busy(*impl_, ids);
  std::vector<DraftRequest> reqs(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& s = *busy.held[i];
    if (!s.draft) fail("sequence ", batch[i].seq, " drafts without enable_draft()");
    if (batch[i].tokens > impl_->rollback_tokens)
      fail("--spec-draft-tokens ", batch[i].tokens, " is more than the states' rollback reach of ",
           impl_->rollback_tokens, " tokens (EngineOptions::rollback_tokens)");
    if (batch[i].last < 0 || int64_t(batch[i].last) >= vocab_size())
      fail("sequence ", batch[i].seq, ": token ", batch[i].last, " is outside the vocabulary");
    reqs[i] = {s.draft.get(), batch[i].last, batch[i].tokens,
               sampler_config(batch[i].sampling, impl_->sample_vocab())};
  }
  draft_batch(*impl_->model, reqs, stats);
  std::vector<std::vector<int32_t>> out(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) out[i] = busy.held[i]->draft->drafts;
  return out;
}

std::vector<int32_t> Engine::accept_drafts(SeqId seq, const float* logits, const SamplingParams& params,
                                           SpecDecodeStats* stats) {
  const SeqId ids[1] = {seq};
  Impl::Busy busy(*impl_, ids);
  Sequence& s = *busy.held[0];
  if (!s.draft) fail("sequence ", seq, " accepts drafts without enable_draft()");
  if (!s.sampler) s.sampler = std::make_unique<Sampler>(sampler_config(params, impl_->sample_vocab()));
  std::vector<int32_t> emitted;
  try {
    emitted = nibble::accept_drafts(*impl_->model, *s.state, *s.draft, *s.sampler, s.history, logits, stats);
  } catch (const Error& e) {
    fail("sequence ", seq, ": ", e.what());
  }
  s.history.resize(size_t(s.state->position()));
  return emitted;
}

}  // namespace nibble
