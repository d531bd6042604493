#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "runtime/sampler.h"
#include "util/error.h"

namespace nibble {

void check_speculative(const Model& model, int64_t draft_tokens, int64_t rollback_tokens) {
  if (draft_tokens < 1 || draft_tokens > kMaxDraftTokens)
    fail("--spec-draft-tokens must be in [1, ", kMaxDraftTokens, "] (0 = off), got ", draft_tokens);
  if (draft_tokens > rollback_tokens)
    fail("--spec-draft-tokens ", draft_tokens, " is more than the states' rollback reach of ", rollback_tokens,
         " tokens (EngineOptions::rollback_tokens): rejected drafts could not be rolled back");
  if (!model.has_draft()) fail("speculative decoding needs the model's MTP layer: ", model.draft_unavailable());
}

int32_t rejection_sample(std::span<const std::pair<int32_t, double>> p, std::span<const std::pair<int32_t, double>> q,
                         int32_t draft, double u1, double u2, bool* accepted) {
  double pd = 0, qd = 0;
  for (const auto& [id, pr] : p)
    if (id == draft) pd = pr;
  std::unordered_map<int32_t, double> qmap;
  qmap.reserve(q.size());
  for (const auto& [id, pr] : q) qmap[id] = pr;
  if (auto it = qmap.find(draft); it != qmap.end()) qd = it->second;
  // Accept with probability min(1, p(d) / q(d)); u1 < ratio is that event.
  if (qd > 0 && u1 * qd < pd) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  // Residual max(0, p - q), normalised; it has mass whenever a rejection is
  // possible (p(d) < q(d) for the draft means p > q somewhere else).
  double mass = 0;
  for (const auto& [id, pr] : p) {
    auto it = qmap.find(id);
    mass += std::max(0.0, pr - (it == qmap.end() ? 0.0 : it->second));
  }
  const bool residual = mass > 0;
  const double target = u2 * (residual ? mass : 1.0);
  double acc = 0;
  for (const auto& [id, pr] : p) {
    double w = pr;
    if (residual) {
      auto it = qmap.find(id);
      w = std::max(0.0, pr - (it == qmap.end() ? 0.0 : it->second));
    }
    acc += w;
    if (target < acc) return id;
  }
  // Rounding left the target past the last bucket: the last token with weight.
  for (size_t i = p.size(); i-- > 0;) {
    auto it = qmap.find(p[i].first);
    if (!residual || p[i].second > (it == qmap.end() ? 0.0 : it->second)) return p[i].first;
  }
  return p.back().first;
}

namespace {

// splitmix64, like the Sampler's, on its own stream.
constexpr uint64_t kUniformSalt = 0x7370656364656364ull;
double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

class Uniform {
 public:
  explicit Uniform(uint64_t seed) : state_(seed ^ kUniformSalt) {}
  double next() { return next_uniform(state_); }

 private:
  uint64_t state_;
};

// The draft distribution q of speculative_generate(): the target's
// temperature and filters, without penalties (any q keeps the output exact;
// this one is close to p).
SamplerConfig draft_config(const SamplerConfig& target) {
  SamplerConfig d = target;
  d.repetition_penalty = 1.0f;
  d.presence_penalty = d.frequency_penalty = 0.0f;
  d.context.clear();
  d.observe = nullptr;
  return d;
}

int32_t draw(std::span<const std::pair<int32_t, double>> dist, double u) {
  double acc = 0;
  for (const auto& [id, pr] : dist) {
    acc += pr;
    if (u < acc) return id;
  }
  return dist.back().first;
}

}  // namespace

GenerateResult speculative_generate(const Model& model, ModelState& state, std::span<const int32_t> prompt,
                                    const GenerateOptions& options, int64_t k,
                                    const std::function<bool(int32_t)>& on_token, SpecDecodeStats* stats) {
  if (options.max_new_tokens < 0) fail("--max-tokens must be >= 0, got ", options.max_new_tokens);
  if (k < 1 || k > kMaxDraftTokens) fail("--spec-draft-tokens must be in [1, ", kMaxDraftTokens, "], got ", k);
  if (!model.has_draft()) fail("speculative decoding needs the model's MTP layer: ", model.draft_unavailable());
  if (prompt.empty()) fail("prefill: the prompt has no tokens");
  // Tokens that rejection sampling picks are not drawn by Sampler::sample,
  // so per-token log-probabilities would be missing for them.
  if (options.sampler.observe)
    fail("speculative decoding (--spec-draft-tokens) does not report per-token log-probabilities; "
         "turn it off (--no-spec) to get them");
  std::vector<int64_t> stops = options.stop_tokens;
  if (options.use_model_eos)
    for (int64_t e : model.eos_token_ids()) stops.push_back(e);
  const int64_t context = model.max_context();
  if (int64_t(prompt.size()) > context - state.position()) {
    if (state.position() == 0)
      fail("the prompt has ", prompt.size(), " tokens but the model's context holds ", context,
           " (max_position_embeddings)");
    fail("the prompt has ", prompt.size(), " tokens but only ", context - state.position(), " of the model's ",
         context, "-token context are left (", state.position(), " already in the session)");
  }
  const int64_t V = model.vocab_size(), W = model.hidden_width();
  // Checked before the chunked prefill below, so a bad id changes no state.
  for (size_t t = 0; t < prompt.size(); ++t)
    if (prompt[t] < 0 || prompt[t] >= V)
      fail("prompt token ", t, " (id ", prompt[t], ") is outside the vocabulary of ", V);
  Sampler sampler(options.sampler);
  const Sampler draft_sampler(draft_config(options.sampler));
  Uniform uniform(options.sampler.seed);
  SpecDecodeStats local;
  local.drafted.assign(size_t(k), 0);
  local.accepted.assign(size_t(k), 0);
  using Clock = std::chrono::steady_clock;

  GenerateResult r;
  r.prompt_tokens = int64_t(prompt.size());
  // Prefill chunk by chunk (the model's step budget), keeping the main
  // model's rows of the last m positions, the ones the draft layer reads.
  // The draft layer reads each chunk's rows whose next token is known (all
  // but the prompt's last) right after the chunk, so a draft step is then one
  // row, and the rows held at once are one chunk's even when m is the whole
  // prompt (a full-attention draft layer, DeepSeek-V3's).
  const int64_t n = int64_t(prompt.size()), m = std::min(n, std::max<int64_t>(1, model.draft_context()));
  const int64_t chunk = std::max<int64_t>(1, model.step_token_budget());
  const bool drafting = options.max_new_tokens > 0;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<float> pending_hidden;    // [rows][W]: main states the draft layer has not read
  std::vector<int32_t> pending_tokens;  // the token after each pending row but the last
  std::vector<float> chunk_hidden;
  std::unique_ptr<ModelState> draft_state = drafting ? model.new_draft_state() : nullptr;
  auto t0 = Clock::now();
  for (int64_t a = 0; a < n; a += chunk) {
    const int64_t b = std::min(n, a + chunk), h0 = std::max(a, n - m);  // rows [h0, b) are kept
    SeqStep s;
    s.state = &state;
    s.tokens = prompt.subspan(size_t(a), size_t(b - a));
    s.rows = b == n ? LogitRows::last : LogitRows::none;
    s.logits = b == n ? logits.data() : nullptr;
    if (drafting && h0 < b) {
      chunk_hidden.resize(size_t((b - h0) * W));
      s.hidden = chunk_hidden.data();
      s.hidden_first = h0 - a;
    }
    model.step(std::span<const SeqStep>(&s, 1));
    if (!drafting || h0 >= b) continue;
    if (const int64_t known = std::min(b, n - 1) - h0; known > 0) {
      DraftStep d;
      d.state = draft_state.get();
      d.tokens = prompt.subspan(size_t(h0 + 1), size_t(known));
      d.hidden = chunk_hidden.data();
      d.rows = LogitRows::none;
      model.draft_step(std::span<const DraftStep>(&d, 1));
    }
    if (b == n) pending_hidden.assign(chunk_hidden.end() - W, chunk_hidden.end());  // row n - 1
  }
  r.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!drafting) return r;
  auto t1 = Clock::now();

  // Emits one token; false when generation ends with it.
  bool done = false;
  auto emit = [&](int32_t id) {
    r.tokens.push_back(id);
    if (std::find(stops.begin(), stops.end(), int64_t(id)) != stops.end()) {
      r.reason = StopReason::stop_token;
      return done = true, false;
    }
    if (on_token && !on_token(id)) {
      r.reason = StopReason::callback;
      return done = true, false;
    }
    if (int64_t(r.tokens.size()) >= options.max_new_tokens) {
      r.reason = StopReason::max_tokens;
      return done = true, false;
    }
    return true;
  };
  int32_t last = sampler.sample(logits.data(), V);
  emit(last);

  std::vector<float> draft_logits(static_cast<size_t>(V)), own(static_cast<size_t>(W)), own_next(static_cast<size_t>(W));
  std::vector<int32_t> verify_tokens;
  std::vector<float> verify_logits, verify_hidden;
  std::vector<std::vector<std::pair<int32_t, double>>> q(static_cast<size_t>(k));
  // One draft-model step: `tokens` with their input rows `hidden`, its
  // logits into draft_logits and its own output rows into `hidden_out`.
  auto draft = [&](std::span<const int32_t> tokens, const float* hidden, float* hidden_out) {
    DraftStep d;
    d.state = draft_state.get();
    d.tokens = tokens;
    d.hidden = hidden;
    d.logits = draft_logits.data();
    d.hidden_out = hidden_out;
    model.draft_step(std::span<const DraftStep>(&d, 1));
  };
  while (!done) {
    const int64_t P = state.position();
    if (P >= context) {  // no room to feed the last token
      r.reason = StopReason::context_full;
      break;
    }
    // Drafts this step: each emitted token needs its budget, each fed one its context.
    const int64_t kk = std::min({k, options.max_new_tokens - int64_t(r.tokens.size()) - 1, context - P - 1});
    verify_tokens.assign(1, last);
    auto d0 = Clock::now();
    if (kk > 0) {
      // Draft 1: the queued main-model rows, the last of them with `last`.
      pending_tokens.push_back(last);
      draft(pending_tokens, pending_hidden.data(), own.data());
      const int64_t keep = draft_state->position();  // rows read from the main model
      for (int64_t j = 0; j < kk; ++j) {
        q[size_t(j)] = draft_sampler.distribution(draft_logits.data(), V);
        const int32_t dj = draw(q[size_t(j)], uniform.next());
        verify_tokens.push_back(dj);
        if (j + 1 == kk) break;
        // Draft j + 1 reads draft j's own output state (chained).
        const int32_t one[1] = {dj};
        draft(one, own.data(), own_next.data());
        own.swap(own_next);
      }
      // The chained rows read the draft's own states: the next step replaces
      // them by rows of the main model's.
      model.truncate(*draft_state, keep);
      local.draft_forwards += kk;
    }
    auto v0 = Clock::now();
    local.draft_seconds += std::chrono::duration<double>(v0 - d0).count();
    // Verify: one main step over [last, d_1 .. d_kk], every row's logits and state.
    const int64_t rows = kk + 1;
    verify_logits.resize(size_t(rows * V));
    verify_hidden.resize(size_t(rows * W));
    {
      SeqStep s;
      s.state = &state;
      s.tokens = verify_tokens;
      s.rows = LogitRows::all;
      s.logits = verify_logits.data();
      s.hidden = verify_hidden.data();
      model.step(std::span<const SeqStep>(&s, 1));
    }
    local.verify_seconds += std::chrono::duration<double>(Clock::now() - v0).count();
    // Accept the longest agreeing prefix, then the main model's own token.
    std::vector<int32_t> emitted;
    bool all_accepted = true;
    for (int64_t j = 0; j < kk && !done; ++j) {
      const auto p = sampler.distribution(verify_logits.data() + j * V, V);
      bool accepted = false;
      const double u1 = uniform.next(), u2 = uniform.next();
      const int32_t tok = rejection_sample(p, q[size_t(j)], verify_tokens[size_t(j + 1)], u1, u2, &accepted);
      sampler.record(tok);
      local.drafted[size_t(j)] += 1;
      local.accepted[size_t(j)] += accepted;
      emitted.push_back(tok);
      emit(tok);
      if (!accepted) {
        all_accepted = false;
        break;
      }
    }
    if (all_accepted && !done) {
      const int32_t tok = sampler.sample(verify_logits.data() + kk * V, V);
      emitted.push_back(tok);
      emit(tok);
    }
    local.steps += 1;
    local.emitted += int64_t(emitted.size());
    // Keep the rows of the fed tokens before the last emitted one (that one is
    // not fed, as in plain decoding): [last, e_1 .. e_{i-1}].
    const int64_t i = int64_t(emitted.size());
    model.truncate(state, P + i);
    pending_hidden.assign(verify_hidden.begin(), verify_hidden.begin() + i * W);
    pending_tokens.assign(emitted.begin(), emitted.end() - 1);
    last = emitted.back();
  }
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  if (stats) stats->add(local);
  return r;
}

// ---- Speculation across a batch ----------------------------------------------

DraftTrack fork_track(const Model& model, const DraftTrack& track) {
  DraftTrack t;
  t.state = model.fork(*track.state);
  t.hidden = track.hidden;
  t.next = track.next;
  t.rows = track.rows;
  t.drafts = track.drafts;
  t.q = track.q;
  t.uniform = track.uniform;
  t.seeded = track.seeded;
  return t;
}

void reset_track(const Model& model, DraftTrack& track) {
  const bool seeded = track.seeded;
  const uint64_t uniform = track.uniform;
  track = DraftTrack{};
  track.state = model.new_draft_state();
  track.seeded = seeded;
  track.uniform = uniform;
}

int64_t capture_rows_wanted(const Model& model) {
  // The layer's window, and a verify step's k + 1 rows whatever the window.
  return std::max<int64_t>(model.draft_context(), kMaxDraftTokens + 1);
}

void capture_rows(const Model& model, DraftTrack& track, std::span<const int32_t> tokens, const float* hidden,
                  int64_t captured) {
  const int64_t n = int64_t(tokens.size()), W = model.hidden_width();
  if (n == 0 || captured == 0) return;
  if (captured < n) {
    // Rows before the captured ones were not kept: the pending run starts over.
    track.hidden.clear();
    track.next.clear();
    track.rows = 0;
  } else if (track.rows > 0) {
    track.next.push_back(tokens[0]);  // the token after the previous last row
  }
  track.hidden.insert(track.hidden.end(), hidden, hidden + captured * W);
  track.next.insert(track.next.end(), tokens.end() - captured + 1, tokens.end());
  track.rows += captured;
  const int64_t keep = capture_rows_wanted(model);
  if (track.rows > keep) {
    const int64_t drop = track.rows - keep;
    track.hidden.erase(track.hidden.begin(), track.hidden.begin() + drop * W);
    track.next.erase(track.next.begin(), track.next.begin() + drop);
    track.rows = keep;
  }
}

bool draft_reads_all_rows(const Model& model) { return model.draft_context() >= model.max_context(); }

void feed_pending_rows(const Model& model, std::span<DraftTrack* const> tracks) {
  if (!draft_reads_all_rows(model)) return;
  const int64_t W = model.hidden_width();
  std::vector<DraftStep> steps;
  std::vector<DraftTrack*> fed;
  for (DraftTrack* t : tracks) {
    // A verify step captures at most kMaxDraftTokens + 1 rows, which
    // accept_drafts reads back: those stay.
    if (!t || t->rows <= kMaxDraftTokens + 1) continue;
    DraftStep d;
    d.state = t->state.get();
    d.tokens = t->next;  // [rows - 1]: every row but the last has its next token
    d.hidden = t->hidden.data();
    d.rows = LogitRows::none;
    steps.push_back(d);
    fed.push_back(t);
  }
  if (steps.empty()) return;
  model.draft_step(steps);
  for (DraftTrack* t : fed) {
    t->hidden.erase(t->hidden.begin(), t->hidden.end() - W);
    t->next.clear();
    t->rows = 1;
  }
}

void draft_batch(const Model& model, std::span<DraftRequest> batch, SpecDecodeStats* stats) {
  const int64_t V = model.vocab_size(), W = model.hidden_width();
  auto d0 = std::chrono::steady_clock::now();
  struct Work {
    DraftRequest* req;
    Sampler q_sampler;
    std::vector<int32_t> tokens;  // round 1: the pending rows' next tokens, `last` at the end
    std::vector<float> logits, own, own_next;
    int64_t keep = 0;             // the draft state's position after round 1 (rows from the main model)
  };
  std::vector<Work> work;
  work.reserve(batch.size());
  int64_t max_k = 0;
  for (DraftRequest& r : batch) {
    DraftTrack& t = *r.track;
    t.drafts.clear();
    t.q.clear();
    if (r.k < 1 || t.rows == 0) continue;
    if (r.k > kMaxDraftTokens) fail("--spec-draft-tokens must be in [1, ", kMaxDraftTokens, "], got ", r.k);
    if (!t.seeded) {
      t.uniform = r.sampler.seed ^ kUniformSalt;
      t.seeded = true;
    }
    Work w{&r, Sampler(draft_config(r.sampler)), t.next, std::vector<float>(size_t(V)),
           std::vector<float>(size_t(W)), std::vector<float>(size_t(W)), 0};
    w.tokens.push_back(r.last);
    work.push_back(std::move(w));
    max_k = std::max(max_k, r.k);
  }
  if (work.empty()) return;
  std::vector<DraftStep> steps;
  std::vector<int32_t> one(work.size());
  for (int64_t j = 0; j < max_k; ++j) {
    steps.clear();
    std::vector<Work*> in_round;
    for (size_t i = 0; i < work.size(); ++i) {
      Work& w = work[i];
      if (w.req->k <= j) continue;
      DraftStep d;
      d.state = w.req->track->state.get();
      if (j == 0) {
        // Draft 1 reads the main model's pending rows, the last with `last`.
        d.tokens = w.tokens;
        d.hidden = w.req->track->hidden.data();
      } else {
        // Draft j + 1 reads draft j's own output state and token (chained).
        one[i] = w.req->track->drafts.back();
        d.tokens = std::span<const int32_t>(&one[i], 1);
        d.hidden = w.own.data();
      }
      d.rows = LogitRows::last;
      d.logits = w.logits.data();
      d.hidden_out = w.own_next.data();
      steps.push_back(d);
      in_round.push_back(&w);
    }
    model.draft_step(steps);
    for (Work* w : in_round) {
      DraftTrack& t = *w->req->track;
      if (j == 0) w->keep = t.state->position();
      w->own.swap(w->own_next);
      t.q.push_back(w->q_sampler.distribution(w->logits.data(), V));
      t.drafts.push_back(draw(t.q.back(), next_uniform(t.uniform)));
    }
    if (stats) stats->draft_forwards += int64_t(in_round.size());
  }
  for (Work& w : work) {
    DraftTrack& t = *w.req->track;
    // The chained rows read the draft's own states: the next round replaces
    // them by the main model's rows of the accepted positions.
    model.truncate(*t.state, w.keep);
    t.hidden.clear();
    t.next.clear();
    t.rows = 0;
  }
  if (stats) stats->draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
}

std::vector<int32_t> accept_drafts(const Model& model, ModelState& state, DraftTrack& track, Sampler& target,
                                   std::span<const int32_t> history, const float* logits, SpecDecodeStats* stats) {
  const int64_t V = model.vocab_size(), W = model.hidden_width();
  const int64_t k = int64_t(track.drafts.size());
  const int64_t P = state.position() - (k + 1);  // where `last` was fed
  if (P < 0 || int64_t(history.size()) != state.position() || track.rows != k + 1)
    fail("accept_drafts: the sequence was not just fed [last, ", k, " drafts] (position ", state.position(),
         ", ", track.rows, " rows captured)");
  std::vector<int32_t> emitted;
  bool all_accepted = true;
  if (stats) {
    // Every proposed draft counts (vLLM's num_draft_tokens), also those
    // after the first rejection, which are never checked.
    if (stats->drafted.size() < size_t(k)) stats->drafted.resize(size_t(k), 0);
    if (stats->accepted.size() < size_t(k)) stats->accepted.resize(size_t(k), 0);
    for (int64_t j = 0; j < k; ++j) stats->drafted[size_t(j)] += 1;
  }
  for (int64_t j = 0; j < k; ++j) {
    // Row j predicts the token after [.., last, d_1 .. d_j]: those are its context.
    const auto ctx = history.first(size_t(P + j + 1));
    const auto p = target.distribution(logits + j * V, V, ctx);
    bool accepted = false;
    const double u1 = next_uniform(track.uniform), u2 = next_uniform(track.uniform);
    const int32_t tok = rejection_sample(p, track.q[size_t(j)], track.drafts[size_t(j)], u1, u2, &accepted);
    target.record(tok);
    if (stats) stats->accepted[size_t(j)] += accepted;
    emitted.push_back(tok);
    if (!accepted) {
      all_accepted = false;
      break;
    }
  }
  if (all_accepted) emitted.push_back(target.sample(logits + k * V, V, history.first(size_t(P + k + 1))));
  const int64_t i = int64_t(emitted.size());
  if (stats) {
    stats->steps += 1;
    stats->emitted += i;
  }
  // Keep [last, e_1 .. e_{i-1}] fed; their main-model rows are the next
  // round's pending rows (the last one's next token is e_i, given then).
  model.truncate(state, P + i);
  track.hidden.resize(size_t(i * W));
  track.next.assign(emitted.begin(), emitted.end() - 1);
  track.rows = i;
  track.drafts.clear();
  track.q.clear();
  return emitted;
}

}  // namespace nibble
