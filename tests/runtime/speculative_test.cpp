// Speculative decoding (runtime/speculative.h):
// - greedy output equals plain decoding token for token: with the fixtures'
//   real MTP layers (random weights: drafts mostly rejected), and with the
//   main model as its own draft (MainAsDraft below: every draft accepted, or
//   every w-th one wrong), on every fixture and the shipped model, several
//   prompts, across sliding-window and compression-window boundaries;
// - rejection sampling gives exactly the target distribution: a chi-square
//   test of rejection_sample() against p (and a deliberately wrong sampler
//   shown to fail the same test), and of whole speculative generations on a
//   fixture against the distribution computed from the model's logits;
// - a full-attention draft layer (DeepSeek-V3's MTP) reads every prompt row,
//   however the prompt was split into steps;
// - bad input: k out of range, a model without an MTP layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "model/registry.h"
#include "nibble/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "util/error.h"

namespace nibble {
namespace {

std::string fixture(const std::string& name) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv4/" + name; }
const std::string kShipped = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
// DeepSeek-V3's FP8 fixture, whose MTP layer (random weights) attends every
// row it was fed: draft_context() is the whole context.
const std::string kDsv3Mtp = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv3/tiny_fp8";

LoadOptions load_options() {
  LoadOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10.0;
  return o;
}

// ---------------------------------------------------------------------------
// The main model as its own draft layer: the draft state is a main state fed
// the same tokens, so each draft is the main model's own greedy choice and is
// accepted, except at every `wrong_every`-th draft proposal, whose best logit
// is knocked out (that draft is then the second choice, rejected under
// greedy); with `noise`, every draft logit moves by up to that much (a draft
// distribution q close to, but not equal to, the main model's p). It needs the
// prompt to start its state, as the real MTP layer needs the main model's rows.
class MainAsDraft : public Model {
 public:
  MainAsDraft(const Model& inner, std::vector<int32_t> prompt, int64_t wrong_every, int64_t context, float noise = 0)
      : inner_(inner), prompt_(std::move(prompt)), wrong_every_(wrong_every), context_(context), noise_(noise) {}

  const std::string& architecture() const override { return inner_.architecture(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  int64_t bos_token_id() const override { return inner_.bos_token_id(); }
  const std::vector<int64_t>& eos_token_ids() const override { return inner_.eos_token_ids(); }
  int64_t max_context() const override { return inner_.max_context(); }
  const Plan& plan() const override { return inner_.plan(); }
  std::unique_ptr<ModelState> new_state() const override { return inner_.new_state(); }
  std::unique_ptr<ModelState> fork(const ModelState& s) const override {
    if (auto* d = dynamic_cast<const DraftState*>(&s)) {
      auto c = std::make_unique<DraftState>();
      c->main = inner_.fork(*d->main);
      c->base = d->base;
      return c;
    }
    return inner_.fork(s);
  }
  void truncate(ModelState& s, int64_t p) const override {
    if (auto* d = dynamic_cast<DraftState*>(&s)) return inner_.truncate(*d->main, d->base + p);
    inner_.truncate(s, p);
  }
  void step(std::span<const SeqStep> batch, StepStats* stats) const override { inner_.step(batch, stats); }
  int64_t step_token_budget() const override { return inner_.step_token_budget(); }
  int64_t hidden_width() const override { return inner_.hidden_width(); }
  bool has_draft() const override { return true; }
  std::string draft_unavailable() const override { return ""; }
  int64_t draft_context() const override { return context_; }
  std::unique_ptr<ModelState> new_draft_state() const override {
    // Rows start at main position n - m (m = the rows speculative_generate
    // feeds first); row r's token is the one at n - m + r + 1, so the state
    // has read tokens 0 .. n - m.
    const int64_t n = int64_t(prompt_.size()), m = std::min(n, context_);
    auto d = std::make_unique<DraftState>();
    d->main = inner_.new_state();
    d->base = n - m + 1;
    inner_.forward(*d->main, std::span<const int32_t>(prompt_.data(), size_t(d->base)), nullptr, false);
    return d;
  }
  void draft_step(std::span<const DraftStep> batch) const override {
    const int64_t V = vocab_size();
    for (const DraftStep& s : batch) {
      auto& d = dynamic_cast<DraftState&>(*s.state);
      const int64_t n = int64_t(s.tokens.size());
      std::vector<float> all(size_t(n * V));
      inner_.forward(*d.main, s.tokens, all.data(), true);
      float* l = all.data() + (n - 1) * V;  // the proposal's row (none: rows only read)
      if (s.rows != LogitRows::none && wrong_every_ > 0 && ++proposals_ % wrong_every_ == 0) l[argmax(l, V)] = -1e30f;
      if (noise_ > 0)
        for (int64_t v = 0; v < V; ++v) l[v] += noise_ * (float(rng_() % 2001) / 1000.0f - 1.0f);
      if (s.rows == LogitRows::all) std::copy(all.begin(), all.end(), s.logits);
      if (s.rows == LogitRows::last) std::copy(all.end() - V, all.end(), s.logits);
      if (s.hidden_out) std::fill(s.hidden_out, s.hidden_out + hidden_width(), 0.0f);
    }
  }

 private:
  struct DraftState : ModelState {
    std::unique_ptr<ModelState> main;
    int64_t base = 0;  // main tokens read before row 0's
    int64_t position() const override { return main->position() - base; }
    int64_t truncate_floor() const override { return 0; }
    uint64_t memory_bytes() const override { return main->memory_bytes(); }
  };
  const Model& inner_;
  std::vector<int32_t> prompt_;
  int64_t wrong_every_, context_;
  float noise_;
  mutable int64_t proposals_ = 0;
  mutable std::mt19937 rng_{12345};
};

GenerateOptions greedy(int64_t max_new) {
  GenerateOptions g;
  g.max_new_tokens = max_new;
  g.sampler.temperature = 0;
  g.use_model_eos = false;  // long runs across the window boundaries
  return g;
}

std::vector<int32_t> plain_tokens(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& g) {
  Session s(model);
  return generate(s, prompt, g).tokens;
}

std::vector<int32_t> prompt_of(const Model& model, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = int32_t(2 + rng() % uint64_t(model.vocab_size() - 2));
  if (model.bos_token_id() >= 0) p[0] = int32_t(model.bos_token_id());
  return p;
}

struct Case {
  std::string path;
  bool real_mtp;
};

// Prompt lengths and new tokens: short prompts, and ones that end just before
// 128 so that decoding crosses the sliding windows (8, 12, 64) and the
// compressed windows (4 and 128) during verification and rollback.
const std::vector<std::pair<int64_t, int64_t>> kPrompts = {{1, 24}, {6, 30}, {121, 20}};

class SpecGreedy : public ::testing::TestWithParam<Case> {};

TEST_P(SpecGreedy, MainModelAsDraftGivesPlainTokens) {
  auto model = load_model(GetParam().path, load_options());
  for (const auto& [n, new_tokens] : kPrompts) {
    const auto prompt = prompt_of(*model, n, uint64_t(n));
    const GenerateOptions g = greedy(new_tokens);
    const auto want = plain_tokens(*model, prompt, g);
    for (int64_t wrong : {0, 2, 3}) {
      for (int64_t k : {1, 2, 4}) {
        MainAsDraft m(*model, prompt, wrong, 5);
        auto st = m.new_state();
        SpecDecodeStats stats;
        GenerateResult got = speculative_generate(m, *st, prompt, g, k, {}, &stats);
        ASSERT_EQ(got.tokens, want) << GetParam().path << " prompt " << n << " k " << k << " wrong every " << wrong;
        // The last sampled token is not fed.
        EXPECT_EQ(st->position(), n + int64_t(want.size()) - 1);
        int64_t drafted = 0, accepted = 0;
        for (size_t j = 0; j < stats.drafted.size(); ++j) {
          drafted += stats.drafted[j];
          accepted += stats.accepted[j];
        }
        EXPECT_EQ(stats.emitted, int64_t(want.size()) - 1);  // the first token comes from the prefill
        if (wrong == 0) {
          EXPECT_EQ(accepted, drafted) << "every draft is the main model's own choice";
        } else {
          EXPECT_LT(accepted, drafted);
        }
        EXPECT_GT(accepted, 0);
      }
    }
  }
}

// The models that carry an MTP layer (hf_tiny has none): the fixtures' random
// ones and the shipped model's trained one (tools/train_shipped_mtp.py).
class SpecGreedyMtp : public ::testing::TestWithParam<Case> {};

TEST_P(SpecGreedyMtp, RealMtpLayerGivesPlainTokens) {
  ASSERT_TRUE(GetParam().real_mtp) << GetParam().path;
  auto model = load_model(GetParam().path, load_options());
  ASSERT_TRUE(model->has_draft());
  SpecDecodeStats total;
  for (const auto& [n, new_tokens] : kPrompts) {
    const auto prompt = prompt_of(*model, n, uint64_t(n) + 100);
    const GenerateOptions g = greedy(new_tokens);
    const auto want = plain_tokens(*model, prompt, g);
    for (int64_t k : {1, 2, 3, 5}) {
      auto st = model->new_state();
      GenerateResult got = speculative_generate(*model, *st, prompt, g, k, {}, &total);
      ASSERT_EQ(got.tokens, want) << GetParam().path << " prompt " << n << " k " << k;
      EXPECT_EQ(st->position(), n + int64_t(want.size()) - 1);
    }
  }
  std::printf("[ %s ] MTP layer: mean accepted length %.3f over %lld verify steps, first-draft acceptance %lld / %lld\n",
              GetParam().path.c_str(), total.mean_accepted_length(), (long long)total.steps,
              (long long)total.accepted[0], (long long)total.drafted[0]);
}

INSTANTIATE_TEST_SUITE_P(Models, SpecGreedy,
                         ::testing::Values(Case{fixture("flash_tiny_stock"), true}, Case{fixture("flash_tiny_nvfp4"), true},
                                           Case{fixture("hf_tiny_fp8experts"), false}, Case{kShipped, true},
                                           Case{kDsv3Mtp, true}));
INSTANTIATE_TEST_SUITE_P(Models, SpecGreedyMtp,
                         ::testing::Values(Case{fixture("flash_tiny_stock"), true}, Case{fixture("flash_tiny_nvfp4"), true},
                                           Case{kShipped, true}, Case{kDsv3Mtp, true}));

// ---------------------------------------------------------------------------
// A full-attention draft layer (DeepSeek-V3's MTP) must read every row of
// the prompt, also when the prompt is fed in several steps. The first draft
// of speculative_generate (prompt fed in chunks of the step budget) and of
// the Engine (prompt fed in chunks of 17 by the caller, the rows read as they
// are captured) must be bit-identical to a draft state fed all the prompt's
// rows at once, computed here on the Model API.

// The draft logits after the prompt and `last`: main rows 0 .. n-1 (tokens
// 1 .. n-1, then `last`), all in one draft_step, then k - 1 chained greedy drafts.
std::vector<std::vector<float>> all_rows_drafts(const Model& m, std::span<const int32_t> prompt, int32_t last,
                                                int64_t k) {
  const int64_t n = int64_t(prompt.size()), V = m.vocab_size(), W = m.hidden_width();
  std::vector<float> hidden(size_t(n * W));
  auto st = m.new_state();
  SeqStep s;
  s.state = st.get();
  s.tokens = prompt;
  s.rows = LogitRows::none;
  s.hidden = hidden.data();
  m.step(std::span<const SeqStep>(&s, 1));
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(last);
  auto ds = m.new_draft_state();
  std::vector<std::vector<float>> out;
  std::vector<float> own(static_cast<size_t>(W)), in;
  for (int64_t j = 0; j < k; ++j) {
    out.emplace_back(size_t(V));
    in = own;
    DraftStep d;
    d.state = ds.get();
    d.tokens = next;
    d.hidden = j == 0 ? hidden.data() : in.data();
    d.logits = out.back().data();
    d.hidden_out = own.data();
    m.draft_step(std::span<const DraftStep>(&d, 1));
    next = {argmax(out.back().data(), V)};
  }
  return out;
}

// Forwards everything to `inner` and keeps the logits of every draft step
// that wants them (the proposals).
class RecordingDraft : public Model {
 public:
  explicit RecordingDraft(const Model& inner) : inner_(inner) {}
  const std::string& architecture() const override { return inner_.architecture(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  int64_t bos_token_id() const override { return inner_.bos_token_id(); }
  const std::vector<int64_t>& eos_token_ids() const override { return inner_.eos_token_ids(); }
  int64_t max_context() const override { return inner_.max_context(); }
  const Plan& plan() const override { return inner_.plan(); }
  std::unique_ptr<ModelState> new_state() const override { return inner_.new_state(); }
  std::unique_ptr<ModelState> fork(const ModelState& s) const override { return inner_.fork(s); }
  void truncate(ModelState& s, int64_t p) const override { inner_.truncate(s, p); }
  void step(std::span<const SeqStep> batch, StepStats* stats) const override { inner_.step(batch, stats); }
  int64_t step_token_budget() const override { return inner_.step_token_budget(); }
  int64_t hidden_width() const override { return inner_.hidden_width(); }
  bool has_draft() const override { return inner_.has_draft(); }
  std::string draft_unavailable() const override { return inner_.draft_unavailable(); }
  int64_t draft_context() const override { return inner_.draft_context(); }
  std::unique_ptr<ModelState> new_draft_state() const override { return inner_.new_draft_state(); }
  void draft_step(std::span<const DraftStep> batch) const override {
    inner_.draft_step(batch);
    for (const DraftStep& d : batch) {
      if (d.rows == LogitRows::none) {
        rows_read += int64_t(d.tokens.size());
        continue;
      }
      proposals.emplace_back(d.logits, d.logits + vocab_size());
    }
  }
  mutable std::vector<std::vector<float>> proposals;
  mutable int64_t rows_read = 0;  // rows fed without logits (the prompt's)

 private:
  const Model& inner_;
};

TEST(SpecFullAttention, GenerateFeedsTheDraftEveryPromptRow) {
  LoadOptions o = load_options();
  o.max_chunk_tokens = 16;  // the 53-token prompt is prefilled in 4 steps
  auto model = load_model(kDsv3Mtp, o);
  ASSERT_EQ(model->draft_context(), model->max_context());
  const auto prompt = prompt_of(*model, 53, 9);
  const GenerateOptions g = greedy(6);
  const auto want = plain_tokens(*model, prompt, g);
  for (int64_t k : {1, 3}) {
    RecordingDraft rec(*model);
    auto st = model->new_state();
    GenerateResult got = speculative_generate(rec, *st, prompt, g, k, {}, nullptr);
    ASSERT_EQ(got.tokens, want) << "k " << k;
    EXPECT_EQ(rec.rows_read, int64_t(prompt.size()) - 1) << "every row with a known next token, in the prefill";
    // The first round's k drafts: the prompt's rows then `last` = the first sampled token.
    const auto ref = all_rows_drafts(*model, prompt, want[0], k);
    ASSERT_GE(rec.proposals.size(), size_t(k));
    for (int64_t j = 0; j < k; ++j)
      EXPECT_EQ(0, std::memcmp(rec.proposals[size_t(j)].data(), ref[size_t(j)].data(), ref[size_t(j)].size() * 4))
          << "k " << k << " draft " << j + 1;
  }
}

TEST(SpecFullAttention, EngineFeedsTheDraftEveryPromptRow) {
  EngineOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10.0;
  o.load_tokenizer = false;
  auto engine = Engine::load(kDsv3Mtp, o);
  auto model = load_model(kDsv3Mtp, load_options());
  const auto prompt = prompt_of(*model, 61, 11);
  SamplingParams greedy_params;
  greedy_params.temperature = 0;
  for (int64_t k : {1, 3}) {
    const SeqId s = engine->create();
    engine->enable_draft(s);
    int32_t last = 0;
    // Chunks of 17 (more rows than a verify step's 16: the captured rows
    // are read by the draft state as they come, runtime/speculative.h).
    for (size_t a = 0; a < prompt.size(); a += 17) {
      const size_t c = std::min<size_t>(17, prompt.size() - a);
      StepInput in{s, std::span<const int32_t>(prompt).subspan(a, c)};
      in.want_logits = a + c == prompt.size();
      const auto logits = engine->step(std::span<const StepInput>(&in, 1));
      if (in.want_logits) last = engine->sample(s, logits[0].data(), greedy_params);
    }
    const DraftInput d{s, last, k, greedy_params};
    const auto proposed = engine->draft(std::span<const DraftInput>(&d, 1));
    const auto ref = all_rows_drafts(*model, prompt, last, k);
    ASSERT_EQ(proposed[0].size(), size_t(k));
    for (int64_t j = 0; j < k; ++j)
      EXPECT_EQ(proposed[0][size_t(j)], argmax(ref[size_t(j)].data(), model->vocab_size())) << "k " << k << " draft " << j + 1;
    engine->release(s);
  }
}

// Stop rules, the callback and the context end behave as in generate().
TEST(SpecGreedyLimits, StopTokenCallbackAndContext) {
  auto model = load_model(fixture("flash_tiny_stock"), load_options());
  const auto prompt = prompt_of(*model, 6, 6);
  GenerateOptions g = greedy(30);
  const auto want = plain_tokens(*model, prompt, g);
  // A stop token in the middle of an accepted run of drafts ends there.
  g.stop_tokens = {want[9]};
  const auto want_stop = plain_tokens(*model, prompt, g);
  MainAsDraft m(*model, prompt, 0, 5);
  auto st = m.new_state();
  GenerateResult got = speculative_generate(m, *st, prompt, g, 4, {}, nullptr);
  EXPECT_EQ(got.tokens, want_stop);
  EXPECT_EQ(got.reason, StopReason::stop_token);
  // The callback stops after its 7th token.
  g.stop_tokens.clear();
  int calls = 0;
  auto st2 = m.new_state();
  got = speculative_generate(m, *st2, prompt, g, 4, [&](int32_t) { return ++calls < 7; }, nullptr);
  EXPECT_EQ(got.reason, StopReason::callback);
  EXPECT_EQ(got.tokens, std::vector<int32_t>(want.begin(), want.begin() + 7));
  EXPECT_EQ(st2->position(), 6 + 7 - 1);
}

// ---------------------------------------------------------------------------
// Chi-square. The survival function of the chi-square distribution with k
// degrees of freedom: 1 - P(k/2, x/2), P the regularized lower incomplete
// gamma function, by its power series (converges for every x; ~x terms).
double chi2_sf(double x, int k) {
  const double a = 0.5 * k, z = 0.5 * x;
  double term = 1.0 / a, sum = term;
  for (int n = 1; n < 2000; ++n) {
    term *= z / (a + n);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  const double p = std::exp(-z + a * std::log(z) - std::lgamma(a)) * sum;
  return 1.0 - p;
}

// The statistic above which a true null fails with probability `rate`.
double chi2_threshold(int k, double rate) {
  double lo = 0, hi = 10.0 * k + 200;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (chi2_sf(mid, k) > rate ? lo : hi) = mid;
  }
  return hi;
}

// Pearson's statistic of `counts` (N draws) against probabilities `p`; every
// expected count must be >= 5 for the chi-square approximation.
double chi2_stat(const std::map<int32_t, int64_t>& counts, const std::map<int32_t, double>& p, int64_t N) {
  double x = 0;
  for (const auto& [id, pr] : p) {
    const double e = pr * double(N);
    EXPECT_GE(e, 5.0) << "cell " << id << ": too few expected draws for the chi-square approximation";
    auto it = counts.find(id);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    x += (o - e) * (o - e) / e;
  }
  for (const auto& [id, c] : counts)
    if (!p.count(id)) x += 1e30;  // a token p cannot produce
  return x;
}

// One false failure in a million runs.
constexpr double kFalseFailureRate = 1e-6;

TEST(ChiSquare, ThresholdMatchesTables) {
  // Published quantiles (e.g. NIST/SEMATECH tables): chi2_{0.999}(5) = 20.515, chi2_{0.95}(10) = 18.307.
  EXPECT_NEAR(chi2_threshold(5, 1e-3), 20.515, 2e-3);
  EXPECT_NEAR(chi2_threshold(10, 0.05), 18.307, 2e-3);
}

using Dist = std::vector<std::pair<int32_t, double>>;

// Draws N tokens: d ~ q, then `sampler(p, q, d, u1, u2)`.
template <class F>
std::map<int32_t, int64_t> run_sampler(const Dist& p, const Dist& q, int64_t N, uint64_t seed, F&& sampler) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::map<int32_t, int64_t> counts;
  for (int64_t i = 0; i < N; ++i) {
    double u = U(rng), acc = 0;
    int32_t d = q.back().first;
    for (const auto& [id, pr] : q)
      if (u < (acc += pr)) {
        d = id;
        break;
      }
    counts[sampler(p, q, d, U(rng), U(rng))] += 1;
  }
  return counts;
}

TEST(RejectionSampling, OutputIsDistributedAsTarget) {
  // A small vocabulary; q overlaps p only partly (it puts mass on token 5,
  // which p never draws, and too little on 0 and 3).
  const Dist p = {{0, 0.35}, {1, 0.25}, {2, 0.2}, {3, 0.15}, {4, 0.05}};
  const Dist q = {{0, 0.1}, {1, 0.4}, {2, 0.2}, {3, 0.05}, {5, 0.25}};
  const std::map<int32_t, double> pm(p.begin(), p.end());
  const int64_t N = 200000;
  const double limit = chi2_threshold(int(p.size()) - 1, kFalseFailureRate);
  auto right = [](const Dist& p, const Dist& q, int32_t d, double u1, double u2) {
    bool acc;
    return rejection_sample(p, q, d, u1, u2, &acc);
  };
  const double x = chi2_stat(run_sampler(p, q, N, 1, right), pm, N);
  std::printf("rejection sampling: chi2 %.2f (threshold %.2f at false-failure rate %g, %zu dof)\n", x, limit,
              kFalseFailureRate, p.size() - 1);
  EXPECT_LT(x, limit);
  // A classic mistake: on rejection, draw from p itself instead of the
  // residual max(0, p - q). It over-weights what q already proposed.
  auto wrong = [](const Dist& p, const Dist& q, int32_t d, double u1, double u2) {
    bool acc;
    const int32_t t = rejection_sample(p, q, d, u1, u2, &acc);
    if (acc) return t;
    double a = 0;
    for (const auto& [id, pr] : p)
      if (u2 < (a += pr)) return id;
    return p.back().first;
  };
  const double xw = chi2_stat(run_sampler(p, q, N, 1, wrong), pm, N);
  std::printf("wrong sampler (resample from p): chi2 %.1f\n", xw);
  EXPECT_GT(xw, limit);
  // Greedy: one-hot p and q accept iff equal, else p's token.
  bool acc = true;
  EXPECT_EQ(rejection_sample(Dist{{3, 1.0}}, Dist{{2, 1.0}}, 2, 0.0, 0.5, &acc), 3);
  EXPECT_FALSE(acc);
  EXPECT_EQ(rejection_sample(Dist{{2, 1.0}}, Dist{{2, 1.0}}, 2, 0.999, 0.5, &acc), 2);
  EXPECT_TRUE(acc);
}

// Whole speculative generations: over many seeds, the first three generated
// tokens (the second and third drafted, verified and accepted or resampled in
// one step with k = 2) are distributed as plain sampling's, computed exactly
// from the model's logits and the Sampler's distribution. The draft is the
// main model with noise on its logits (the fixtures' random MTP layers share
// no top-3 token with the main model, so nothing would be accepted).
TEST(RejectionSampling, SpeculativeGenerationsAreDistributedAsPlain) {
  auto model = load_model(fixture("flash_tiny_nvfp4"), load_options());
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> prompt = {0, 17, 42};
  GenerateOptions g;
  g.max_new_tokens = 3;
  g.use_model_eos = false;
  g.sampler.temperature = 2.0f;
  g.sampler.top_k = 3;
  // Exact joint distribution of (t1, t2, t3) under plain sampling.
  Sampler probe(g.sampler);
  std::map<int32_t, double> exact;  // key (t1 * V + t2) * V + t3
  auto dist_after = [&](const std::vector<int32_t>& toks) {
    auto st = model->new_state();
    std::vector<float> l(static_cast<size_t>(V));
    model->forward(*st, toks, l.data(), false);
    return probe.distribution(l.data(), V);
  };
  for (const auto& [t1, p1] : dist_after(prompt)) {
    auto a = prompt;
    a.push_back(t1);
    for (const auto& [t2, p2] : dist_after(a)) {
      auto b = a;
      b.push_back(t2);
      for (const auto& [t3, p3] : dist_after(b)) exact[int32_t((t1 * V + t2) * V + t3)] = p1 * p2 * p3;
    }
  }
  const int64_t N = 2000;
  std::map<int32_t, int64_t> counts;
  SpecDecodeStats stats;
  MainAsDraft m(*model, prompt, 0, 5, /*noise=*/3.0f);
  for (int64_t i = 0; i < N; ++i) {
    g.sampler.seed = uint64_t(i) * 7919 + 1;
    auto st = m.new_state();
    GenerateResult r = speculative_generate(m, *st, prompt, g, 2, {}, &stats);
    ASSERT_EQ(r.tokens.size(), 3u);
    counts[int32_t((r.tokens[0] * V + r.tokens[1]) * V + r.tokens[2])] += 1;
  }
  const double x = chi2_stat(counts, exact, N);
  const double limit = chi2_threshold(int(exact.size()) - 1, kFalseFailureRate);
  std::printf("speculative sampling, %zu outcomes: chi2 %.2f (threshold %.2f), first-draft acceptance %lld / %lld\n",
              exact.size(), x, limit, (long long)stats.accepted[0], (long long)stats.drafted[0]);
  EXPECT_LT(x, limit);
  // Both branches ran many times: drafts accepted, and rejected then resampled.
  EXPECT_GT(stats.accepted[0], N / 10);
  EXPECT_LT(stats.accepted[0], stats.drafted[0] - N / 10);
}

// ---------------------------------------------------------------------------
// Bad input.
TEST(SpecErrors, DraftTokensOutOfRange) {
  auto model = load_model(fixture("flash_tiny_stock"), load_options());
  for (int64_t k : {-1, 16, 100}) {
    try {
      check_speculative(*model, k, 16);
      ADD_FAILURE() << k;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--spec-draft-tokens must be in [1, 15]"), std::string::npos) << e.what();
    }
  }
  try {
    check_speculative(*model, 8, 4);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rollback"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_speculative(*model, 3, 16));
}

TEST(SpecErrors, ModelWithoutMtp) {
  EngineOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10;
  auto e = Engine::load(fixture("hf_tiny_fp8experts"), o);
  EXPECT_NE(e->draft_unavailable().find("num_nextn_predict_layers is 0"), std::string::npos) << e->draft_unavailable();
  const SeqId s = e->create();
  GenerationParams p;
  p.draft_tokens = 2;
  const std::vector<int32_t> prompt = {0, 5, 6};
  try {
    e->generate(s, prompt, p);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("MTP layer"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e->position(s), 0) << "nothing ran";
  // With an MTP layer the Engine reports acceptance.
  auto f = Engine::load(fixture("flash_tiny_stock"), o);
  EXPECT_EQ(f->draft_unavailable(), "");
  const SeqId t = f->create();
  p.max_new_tokens = 10;
  p.sampling.temperature = 0;
  GenerationResult r = f->generate(t, prompt, p);
  EXPECT_EQ(r.spec.drafted.size(), 2u);
  EXPECT_GT(r.spec.steps, 0);
  EXPECT_EQ(r.spec.emitted + 1, int64_t(r.tokens.size()));
}

// ---------------------------------------------------------------------------
// Speculation across a batch through the public Engine (what the server's
// scheduler does): three sequences, prompts fed in uneven chunks in shared
// steps, then rounds of Engine::draft for all, one Engine::step verifying
// every sequence's drafts together, Engine::accept_drafts each. Greedy, each
// sequence's tokens must be its own plain Engine::generate's; a fork taken
// mid-way continues the same; truncate restarts drafting cold, still exact.
class SpecBatchEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecBatchEngine, GreedyBatchedEqualsPlain) {
  EngineOptions o;
  o.threads = 2;
  o.bandwidth_gbps = 10.0;
  o.load_tokenizer = false;
  auto engine = Engine::load(GetParam(), o);
  ASSERT_EQ(engine->draft_unavailable(), "");
  auto model = load_model(GetParam(), load_options());
  // Prompt lengths and new tokens: across the 8 / 12 / 64 windows and the 4 / 128 compressions.
  const std::vector<std::pair<int64_t, int64_t>> cases = {{5, 40}, {70, 30}, {121, 24}};
  std::vector<std::vector<int32_t>> prompts, want;
  GenerationParams g;
  g.sampling.temperature = 0;
  g.use_model_eos = false;
  for (const auto& [n, new_tokens] : cases) {
    prompts.push_back(prompt_of(*model, n, uint64_t(n) * 7 + 1));
    g.max_new_tokens = new_tokens;
    const SeqId s = engine->create();
    want.push_back(engine->generate(s, prompts.back(), g).tokens);
    engine->release(s);
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int64_t k : {1, 3}) {
    std::vector<SeqId> seqs;
    for (size_t i = 0; i < cases.size(); ++i) {
      seqs.push_back(engine->create());
      engine->enable_draft(seqs.back());
    }
    // Prefill in chunks of 17 tokens, all sequences in each step.
    std::vector<size_t> fed(cases.size(), 0);
    std::vector<std::vector<int32_t>> got(cases.size());
    std::vector<int32_t> last(cases.size());
    for (bool more = true; more;) {
      more = false;
      std::vector<StepInput> batch;
      std::vector<size_t> who;
      for (size_t i = 0; i < cases.size(); ++i) {
        if (fed[i] == prompts[i].size()) continue;
        const size_t c = std::min<size_t>(17, prompts[i].size() - fed[i]);
        StepInput in{seqs[i], std::span<const int32_t>(prompts[i]).subspan(fed[i], c)};
        in.want_logits = fed[i] + c == prompts[i].size();
        batch.push_back(in);
        who.push_back(i);
        fed[i] += c;
        more = true;
      }
      if (!more) break;
      const auto logits = engine->step(batch);
      for (size_t b = 0; b < batch.size(); ++b) {
        if (logits[b].empty()) continue;
        last[who[b]] = engine->sample(seqs[who[b]], logits[b].data(), greedy);
        got[who[b]].push_back(last[who[b]]);
      }
    }
    SpecDecodeStats stats;
    std::vector<bool> cold(cases.size(), false);  // truncated since the last draft round
    SeqId forked = -1;
    std::vector<int32_t> forked_got;
    int32_t forked_last = 0;
    for (int round = 0;; ++round) {
      std::vector<DraftInput> drafts;
      std::vector<size_t> who;
      for (size_t i = 0; i < cases.size(); ++i) {
        const int64_t left = int64_t(want[i].size()) - int64_t(got[i].size());
        if (left <= 0) continue;
        drafts.push_back({seqs[i], last[i], std::min<int64_t>(k, left - 1), greedy});
        who.push_back(i);
      }
      if (drafts.empty()) break;
      // Sequences with no draft budget left (k = 0) are plain decode steps.
      std::vector<DraftInput> wanting;
      std::vector<size_t> wanting_who;
      for (size_t d = 0; d < drafts.size(); ++d)
        if (drafts[d].tokens > 0) {
          wanting.push_back(drafts[d]);
          wanting_who.push_back(who[d]);
        }
      std::vector<std::vector<int32_t>> feed(cases.size());
      for (size_t i : who) feed[i] = {last[i]};
      const auto proposed = engine->draft(wanting, &stats);
      for (size_t d = 0; d < wanting.size(); ++d) {
        // Right after the truncation the track has read nothing: no drafts.
        EXPECT_EQ(int64_t(proposed[d].size()), cold[wanting_who[d]] ? 0 : wanting[d].tokens) << "round " << round;
        feed[wanting_who[d]].insert(feed[wanting_who[d]].end(), proposed[d].begin(), proposed[d].end());
      }
      cold.assign(cases.size(), false);
      std::vector<StepInput> batch;
      for (size_t i : who) {
        StepInput in{seqs[i], feed[i]};
        in.all_logits = feed[i].size() > 1;
        batch.push_back(in);
      }
      const auto logits = engine->step(batch);
      for (size_t b = 0; b < batch.size(); ++b) {
        const size_t i = who[b];
        std::vector<int32_t> emitted;
        if (batch[b].all_logits) emitted = engine->accept_drafts(seqs[i], logits[b].data(), greedy, &stats);
        else emitted = {engine->sample(seqs[i], logits[b].data(), greedy)};
        ASSERT_GE(emitted.size(), 1u);
        ASSERT_LE(emitted.size(), feed[i].size());
        for (int32_t t : emitted)
          if (got[i].size() < want[i].size()) got[i].push_back(t);
        last[i] = emitted.back();
        EXPECT_EQ(engine->position(seqs[i]), int64_t(prompts[i].size() + got[i].size()) - 1);
      }
      if (round == 2 && forked < 0 && got[1].size() < want[1].size()) {
        // A fork carries the draft track along; it continues alone, speculating.
        forked = engine->fork(seqs[1]);
        forked_got = got[1];
        forked_last = last[1];
      }
      if (round == 4 && got[0].size() + 2 < want[0].size()) {
        // Back one token (a truncation the track cannot follow): drafting restarts cold.
        engine->truncate(seqs[0], engine->position(seqs[0]) - 1);
        cold[0] = true;
        got[0].pop_back();
        last[0] = got[0].back();
      }
    }
    for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], want[i]) << GetParam() << " k " << k << " seq " << i;
    if (forked >= 0) {
      while (forked_got.size() < want[1].size()) {
        const int64_t kk = std::min<int64_t>(k, int64_t(want[1].size() - forked_got.size()) - 1);
        std::vector<int32_t> feed = {forked_last};
        if (kk > 0) {
          const DraftInput d{forked, forked_last, kk, greedy};
          const auto p = engine->draft(std::span<const DraftInput>(&d, 1));
          feed.insert(feed.end(), p[0].begin(), p[0].end());
        }
        StepInput in{forked, feed};
        in.all_logits = feed.size() > 1;
        const auto logits = engine->step(std::span<const StepInput>(&in, 1));
        const auto emitted = in.all_logits ? engine->accept_drafts(forked, logits[0].data(), greedy)
                                           : std::vector<int32_t>{engine->sample(forked, logits[0].data(), greedy)};
        for (int32_t t : emitted)
          if (forked_got.size() < want[1].size()) forked_got.push_back(t);
        forked_last = emitted.back();
      }
      EXPECT_EQ(forked_got, want[1]) << "the fork, k " << k;
      engine->release(forked);
    }
    int64_t drafted = 0, accepted = 0;
    for (size_t j = 0; j < stats.drafted.size(); ++j) {
      drafted += stats.drafted[j];
      accepted += stats.accepted[j];
      if (j > 0) {
        EXPECT_LE(stats.accepted[j], stats.accepted[j - 1]);
      }
    }
    EXPECT_GT(stats.steps, 0);
    EXPECT_GT(drafted, 0);
    EXPECT_LE(accepted, drafted);
    EXPECT_EQ(stats.draft_forwards, drafted);  // one forward per proposed draft
    std::printf("[ %s ] batched k %lld: %lld verify steps, accepted %lld / %lld drafts\n", GetParam().c_str(),
                (long long)k, (long long)stats.steps, (long long)accepted, (long long)drafted);
    for (SeqId s : seqs) engine->release(s);
  }
}

TEST(SpecBatchErrors, EnableDraftAndAccept) {
  EngineOptions o;
  o.threads = 1;
  o.bandwidth_gbps = 10.0;
  o.load_tokenizer = false;
  auto plain = Engine::load(fixture("hf_tiny_fp8experts"), o);
  const SeqId s = plain->create();
  try {
    plain->enable_draft(s);
    FAIL() << "enable_draft on a model without an MTP layer";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("MTP layer"), std::string::npos) << e.what();
  }
  auto engine = Engine::load(fixture("flash_tiny_stock"), o);
  const SeqId t = engine->create();
  SamplingParams greedy;
  greedy.temperature = 0;
  const DraftInput d{t, 3, 2, greedy};
  EXPECT_THROW(engine->draft(std::span<const DraftInput>(&d, 1)), std::exception);  // not enabled
  engine->enable_draft(t);
  const DraftInput far{t, 3, 17, greedy};
  EXPECT_THROW(engine->draft(std::span<const DraftInput>(&far, 1)), std::exception);  // past the rollback reach
  const float logits[1] = {0};
  EXPECT_THROW(engine->accept_drafts(t, logits, greedy), std::exception);  // nothing was drafted and fed
}

// The fixtures' random MTP layers reject nearly every draft; the shipped
// model's trained one accepts many, so rollbacks inside accepted runs happen.
INSTANTIATE_TEST_SUITE_P(Models, SpecBatchEngine,
                         ::testing::Values(fixture("flash_tiny_stock"), fixture("flash_tiny_nvfp4"), kShipped, kDsv3Mtp));

}  // namespace
}  // namespace nibble
