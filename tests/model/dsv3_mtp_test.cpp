// DeepSeek-V3's MTP layer (model.layers.{num_hidden_layers}, deepseek_v3_mtp.cpp)
// against the oracle of tools/gen_dsv3_fixtures.py (step 7: transformers'
// DeepseekV3DecoderLayer and DeepseekV3RMSNorm loaded with the layer's
// dequantized weights): the main forward's hidden rows (the final norm's
// output) feed Model::draft_step, whose logits must match the oracle's for
// whole sequences (fed at once and row by row) and for chained drafts. Also:
// the draft state forks and truncates like a never-fed one (bitwise), a batch
// of drafts equals each alone (bitwise, across sub-steps), and the model says
// its draft is available.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "fixture_util.h"
#include "model/deepseek_v3.h"
#include "runtime/sampler.h"
#include "util/error.h"

namespace nibble {
namespace {

// The main logits' bound (dsv3_test.cpp kRelTol = 2e-5: 3 layers of ~8 f32
// dot products of length <= 96 plus the head, every error lined up) scaled
// to the MTP logit's chain: the main model's 3 layers and its final norm
// (the hidden), eh_proj (length 2D = 160, ~sqrt(160) 2^-24 = 7.5e-7), one
// more decoder layer and the head, so ~4/3 of the main chain: 3e-5 of the
// row's largest |logit| (observed: 1.8e-6). A wrong wiring (the hidden
// before the final norm, the halves of eh_proj swapped, the main head or
// embedding instead of the layer's own, a row attending past itself) moves
// logits by >= 1e-2 relative. (Where the rows' RoPE positions start does
// not show: attention reads relative positions only, so an offset shared by
// every row changes rounding alone.)
constexpr double kRelTol = 3e-5;

const std::string kFixture = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv3/tiny_fp8";

test::MtpOracle oracle() { return test::load_mtp_oracle(kFixture + "/expected/mtp/"); }

// The main model's hidden rows (SeqStep::hidden) of every token: [n][hidden_width].
std::vector<float> main_hidden(const Model& model, std::span<const int32_t> tokens) {
  std::vector<float> hidden(tokens.size() * size_t(model.hidden_width()));
  auto st = model.new_state();
  SeqStep s;
  s.state = st.get();
  s.tokens = tokens;
  s.rows = LogitRows::none;
  s.hidden = hidden.data();
  model.step(std::span<const SeqStep>(&s, 1));
  return hidden;
}

// Feeds rows [0, n) of `hidden` with `next` to a draft state; logits per `rows`.
void feed(const Model& m, ModelState& st, std::span<const int32_t> next, const float* hidden, LogitRows rows,
          float* logits, float* hidden_out = nullptr) {
  DraftStep d;
  d.state = &st;
  d.tokens = next;
  d.hidden = hidden;
  d.rows = rows;
  d.logits = logits;
  d.hidden_out = hidden_out;
  m.draft_step(std::span<const DraftStep>(&d, 1));
}

// The MTP layer of the FP8 fixture (model.layers.3) is bound and runs as the
// draft; the Kimi fixture has none and says so.
TEST(Dsv3Mtp, LayerIsBoundAndDraftIsAvailable) {
  auto m = load_model(kFixture, test::test_load_options("cpu_ref"));
  const auto& dm = static_cast<const DeepseekV3Model&>(*m);
  ASSERT_EQ(dm.weights().mtp.size(), 1u);
  EXPECT_EQ(dm.weights().mtp[0].eh_proj.cols(), 2 * dm.config().hidden);
  EXPECT_EQ(dm.weights().mtp[0].layer.moe.experts.size(), size_t(dm.config().n_experts));
  EXPECT_TRUE(m->has_draft());
  EXPECT_EQ(m->draft_unavailable(), "");
  EXPECT_EQ(m->draft_context(), m->max_context()) << "full attention: every row";
  EXPECT_EQ(m->hidden_width(), dm.config().hidden);
  auto ds = m->new_draft_state();
  EXPECT_EQ(ds->position(), 0);
  EXPECT_EQ(ds->truncate_floor(), 0);
  // A model without the layer says why, and has no draft state.
  auto k = load_model(std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv3/kimi_int4",
                      test::test_load_options("cpu_ref"));
  EXPECT_FALSE(k->has_draft());
  EXPECT_NE(k->draft_unavailable().find("num_nextn_predict_layers 0"), std::string::npos);
  EXPECT_THROW(k->new_draft_state(), Error);
}

// SeqStep::hidden is the final norm's output: each row divided by the norm
// weight has mean square ms / (ms + eps), 1 within 1e-5 here (the residual
// stream's mean square is O(1) >> eps = 1e-6; f32 rounding ~1e-7).
TEST(Dsv3Mtp, HiddenIsTheFinalNormOutput) {
  auto m = load_model(kFixture, test::test_load_options("cpu_ref"));
  const auto& dm = static_cast<const DeepseekV3Model&>(*m);
  const test::MtpOracle o = oracle();
  const auto& toks = o.seqs[0].tokens;
  const int64_t D = m->hidden_width();
  std::vector<float> hidden = main_hidden(*m, toks);
  const std::vector<float>& w = dm.weights().norm;
  for (size_t t = 0; t < toks.size(); ++t) {
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double v = double(hidden[t * size_t(D) + size_t(j)]) / double(w[size_t(j)]);
      ms += v * v;
    }
    EXPECT_NEAR(ms / double(D), 1.0, 1e-5) << "row " << t;
  }
}

TEST(Dsv3Mtp, SequenceLogitsMatchOracle) {
  const test::MtpOracle o = oracle();
  for (const std::string& kernel : {std::string("cpu_ref"), std::string("auto")}) {
    SCOPED_TRACE(kernel);
    auto m = load_model(kFixture, test::test_load_options(kernel));
    const int64_t V = o.vocab, W = m->hidden_width();
    ASSERT_EQ(m->vocab_size(), V);
    for (size_t i = 0; i < o.seqs.size(); ++i) {
      const auto& q = o.seqs[i];
      const int64_t rows = int64_t(q.tokens.size()) - 1;
      std::vector<float> hidden = main_hidden(*m, q.tokens);
      const std::span<const int32_t> next(q.tokens.data() + 1, size_t(rows));
      std::vector<float> logits(size_t(rows * V));
      auto ds = m->new_draft_state();
      feed(*m, *ds, next, hidden.data(), LogitRows::all, logits.data());
      EXPECT_EQ(ds->position(), rows);
      test::Comparison c = test::compare_logits(logits.data(), q.logits.data(), rows, V, kRelTol);
      std::printf("[ tiny_fp8 %s ] MTP sequence %zu (%lld rows): max rel err %.3g at row %lld\n", kernel.c_str(), i,
                  (long long)rows, c.max_err, (long long)c.worst_position);
      EXPECT_LE(c.max_err, kRelTol) << "sequence " << i << " row " << c.worst_position;
      EXPECT_EQ(c.argmax_mismatches, 0);
      // Row by row (decode), and in chunks of 5: bit-identical to all rows at once.
      for (int64_t chunk : {int64_t(1), int64_t(5)}) {
        auto ds2 = m->new_draft_state();
        std::vector<float> got(size_t(rows * V));
        for (int64_t r = 0; r < rows; r += chunk) {
          const int64_t c2 = std::min(chunk, rows - r);
          feed(*m, *ds2, next.subspan(size_t(r), size_t(c2)), hidden.data() + r * W, LogitRows::all,
               got.data() + r * V);
        }
        EXPECT_EQ(0, std::memcmp(got.data(), logits.data(), got.size() * 4)) << "chunks of " << chunk;
      }
    }
  }
}

TEST(Dsv3Mtp, ChainedDraftsMatchOracle) {
  auto m = load_model(kFixture, test::test_load_options("cpu_ref"));
  const test::MtpOracle o = oracle();
  ASSERT_FALSE(o.chains.empty());
  const int64_t V = o.vocab, W = m->hidden_width();
  for (const auto& ch : o.chains) {
    const auto& toks = o.seqs[size_t(ch.sequence)].tokens;
    const int64_t P = ch.prefix;
    // The main model has read tokens 0 .. P-1; token P is the next one.
    std::vector<float> hidden = main_hidden(*m, std::span<const int32_t>(toks.data(), size_t(P)));
    auto ds = m->new_draft_state();
    std::vector<float> own(static_cast<size_t>(W)), logits(static_cast<size_t>(V));
    feed(*m, *ds, std::span<const int32_t>(toks.data() + 1, size_t(P)), hidden.data(), LogitRows::last, logits.data(),
         own.data());
    for (size_t j = 0; j < ch.drafts.size(); ++j) {
      test::Comparison c = test::compare_logits(logits.data(), ch.logits.data() + j * size_t(V), 1, V, kRelTol);
      std::printf("[ tiny_fp8 ] MTP chain prefix %lld draft %zu: rel err %.3g\n", (long long)P, j + 1, c.max_err);
      EXPECT_LE(c.max_err, kRelTol) << "prefix " << P << " draft " << j + 1;
      const int32_t drafted = argmax(logits.data(), V);
      ASSERT_EQ(drafted, ch.drafts[j]) << "prefix " << P << " draft " << j + 1;
      if (j + 1 == ch.drafts.size()) break;
      const std::vector<float> in = own;  // draft j + 1 reads draft j's own head input
      const int32_t tok[1] = {drafted};
      feed(*m, *ds, tok, in.data(), LogitRows::last, logits.data(), own.data());
    }
    EXPECT_EQ(ds->position(), P + int64_t(ch.drafts.size()) - 1);
  }
}

// Draft states fork and truncate like main states: truncated back past rows
// of other input and refed, or forked before them, the logits equal a state
// that never saw them, bit for bit. The full-attention cache truncates to any
// depth (its floor is 0).
TEST(Dsv3Mtp, DraftStateForksAndTruncates) {
  auto m = load_model(kFixture, test::test_load_options("auto"));
  const test::MtpOracle o = oracle();
  const int64_t V = m->vocab_size(), W = m->hidden_width();
  const auto& toks = o.seqs[0].tokens;
  const int64_t n = 40;
  std::vector<float> hidden = main_hidden(*m, std::span<const int32_t>(toks.data(), size_t(n + 1)));
  const std::span<const int32_t> next(toks.data() + 1, size_t(n));
  std::vector<float> want(size_t(n * V)), got(size_t(n * V));
  auto ref = m->new_draft_state();
  feed(*m, *ref, next, hidden.data(), LogitRows::all, want.data());
  for (int64_t back : {int64_t(3), int64_t(17), n - 1}) {
    SCOPED_TRACE(back);
    const int64_t keep = n - back;
    auto st = m->new_draft_state();
    feed(*m, *st, next.first(size_t(keep)), hidden.data(), LogitRows::all, got.data());
    auto forked = m->fork(*st);
    // Other input: another sequence's rows and tokens, then truncated away.
    std::vector<int32_t> junk(static_cast<size_t>(back));
    for (int64_t j = 0; j < back; ++j) junk[size_t(j)] = int32_t(5 + j % 7);
    std::vector<float> scratch(size_t(back * V));
    feed(*m, *st, junk, hidden.data() + 2 * W, LogitRows::all, scratch.data());
    EXPECT_EQ(st->truncate_floor(), 0);
    m->truncate(*st, keep);
    EXPECT_EQ(st->position(), keep);
    feed(*m, *st, next.subspan(size_t(keep)), hidden.data() + keep * W, LogitRows::all, got.data() + keep * V);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "truncated";
    // The fork never saw the junk.
    feed(*m, *forked, next.subspan(size_t(keep)), hidden.data() + keep * W, LogitRows::all, got.data() + keep * V);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "forked";
  }
  auto st = m->new_draft_state();
  EXPECT_THROW(m->truncate(*st, 1), Error);
  m->truncate(*st, 0);
  // A draft state is no main state and the other way round.
  auto main = m->new_state();
  const int32_t one[1] = {3};
  DraftStep d;
  d.state = main.get();
  d.tokens = one;
  d.hidden = hidden.data();
  d.rows = LogitRows::none;
  EXPECT_THROW(m->draft_step(std::span<const DraftStep>(&d, 1)), Error);
  EXPECT_THROW(m->forward(*st, one, nullptr, false), Error);
}

// Several draft sequences in one draft_step, chained and teacher-forced
// entries mixed, at random row counts and with a small step budget (sub-steps
// split sequences): each sequence's logits and hidden_out equal it run alone,
// bitwise.
TEST(Dsv3Mtp, BatchOfDraftsEqualsAloneBitwise) {
  const test::MtpOracle o = oracle();
  LoadOptions opt = test::test_load_options("auto");
  opt.max_chunk_tokens = 9;
  auto m = load_model(kFixture, opt);
  const int64_t V = m->vocab_size(), W = m->hidden_width();
  struct Seq {
    std::vector<int32_t> next;   // [rows]
    std::vector<float> hidden;   // [rows][W]
  };
  std::vector<Seq> seqs;
  for (const auto& q : o.seqs) {
    Seq s;
    s.hidden = main_hidden(*m, q.tokens);
    s.hidden.resize((q.tokens.size() - 1) * size_t(W));
    s.next.assign(q.tokens.begin() + 1, q.tokens.end());
    seqs.push_back(std::move(s));
  }
  // A reversed copy: same rows in another order.
  {
    Seq s;
    std::vector<int32_t> rev(o.seqs[0].tokens.rbegin(), o.seqs[0].tokens.rend());
    s.hidden = main_hidden(*m, rev);
    s.hidden.resize((rev.size() - 1) * size_t(W));
    s.next.assign(rev.begin() + 1, rev.end());
    seqs.push_back(std::move(s));
  }
  // Alone: all rows at once, then one chained draft from the last row's own output.
  std::vector<std::vector<float>> alone(seqs.size()), alone_chain(seqs.size()), alone_own(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t rows = int64_t(seqs[i].next.size());
    alone[i].resize(size_t(rows * V));
    alone_own[i].resize(size_t(W));
    auto st = m->new_draft_state();
    feed(*m, *st, seqs[i].next, seqs[i].hidden.data(), LogitRows::all, alone[i].data(), alone_own[i].data());
    alone_chain[i].resize(size_t(V));
    const std::vector<float> in = alone_own[i];
    const int32_t tok[1] = {argmax(alone[i].data() + (rows - 1) * V, V)};
    feed(*m, *st, tok, in.data(), LogitRows::last, alone_chain[i].data());
  }
  std::mt19937 rng(2026);
  std::vector<std::unique_ptr<ModelState>> states;
  std::vector<std::vector<float>> got(seqs.size()), own(seqs.size()), chain(seqs.size());
  std::vector<bool> chained(seqs.size(), false);
  for (size_t i = 0; i < seqs.size(); ++i) {
    states.push_back(m->new_draft_state());
    got[i].resize(alone[i].size());
    own[i].resize(size_t(W));
    chain[i].resize(size_t(V));
  }
  std::vector<std::vector<float>> in(seqs.size());
  std::vector<int32_t> tok(seqs.size());
  for (;;) {
    std::vector<DraftStep> batch;
    bool done = true;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t pos = states[i]->position(), rows = int64_t(seqs[i].next.size());
      if (chained[i]) continue;
      done = false;
      if (rng() % 3 == 0) continue;
      DraftStep d;
      d.state = states[i].get();
      d.id = int64_t(i);
      if (pos == rows) {
        // The chained draft, from the last row's own output.
        in[i] = own[i];
        tok[i] = argmax(got[i].data() + (rows - 1) * V, V);
        d.tokens = std::span<const int32_t>(&tok[i], 1);
        d.hidden = in[i].data();
        d.rows = LogitRows::last;
        d.logits = chain[i].data();
        chained[i] = true;
      } else {
        const int64_t take = std::min<int64_t>(rows - pos, 1 + int64_t(rng() % 13));
        d.tokens = std::span<const int32_t>(seqs[i].next.data() + pos, size_t(take));
        d.hidden = seqs[i].hidden.data() + pos * W;
        d.rows = LogitRows::all;
        d.logits = got[i].data() + pos * V;
        if (pos + take == rows) d.hidden_out = own[i].data();
      }
      batch.push_back(d);
    }
    if (done) break;
    std::shuffle(batch.begin(), batch.end(), rng);
    m->draft_step(batch);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(got[i].data(), alone[i].data(), got[i].size() * 4)) << "sequence " << i;
    EXPECT_EQ(0, std::memcmp(own[i].data(), alone_own[i].data(), own[i].size() * 4)) << "sequence " << i;
    EXPECT_EQ(0, std::memcmp(chain[i].data(), alone_chain[i].data(), chain[i].size() * 4)) << "sequence " << i;
  }
}

// Bad draft input is named and changes no state.
TEST(Dsv3Mtp, BadDraftInputIsNamed) {
  auto m = load_model(kFixture, test::test_load_options("cpu_ref"));
  const int64_t W = m->hidden_width(), V = m->vocab_size();
  std::vector<float> hidden(static_cast<size_t>(2 * W), 0.5f), logits(static_cast<size_t>(V));
  auto a = m->new_draft_state(), b = m->new_draft_state();
  const int32_t good[2] = {3, 4}, bad[2] = {3, int32_t(V)};
  DraftStep ok;
  ok.state = a.get();
  ok.tokens = good;
  ok.hidden = hidden.data();
  ok.rows = LogitRows::none;
  ok.id = 1;
  DraftStep wrong = ok;
  wrong.state = b.get();
  wrong.tokens = bad;
  wrong.id = 2;
  const DraftStep both[2] = {ok, wrong};
  try {
    m->draft_step(both);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft sequence 2: token 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a->position(), 0) << "checked before anything ran";
  DraftStep no_hidden = ok;
  no_hidden.hidden = nullptr;
  EXPECT_THROW(m->draft_step(std::span<const DraftStep>(&no_hidden, 1)), Error);
  DraftStep twice[2] = {ok, ok};
  EXPECT_THROW(m->draft_step(twice), Error);
  EXPECT_EQ(a->position(), 0);
}

}  // namespace
}  // namespace nibble
