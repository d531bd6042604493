// Batched forward steps, fork and truncate on the DeepSeek-V4 fixtures.
//
// The oracle is the model itself run the simplest way: each sequence alone,
// its whole prompt in one step (whose logits tests/model/deepseek_v4_hf_test
// checks against transformers). Everything else — random batches of
// several sequences at random chunkings, truncate-then-refeed, forks — must
// reproduce those logits bit for bit (memcmp), for every kernel the host can
// run (the opt-in int8 ones too): batch invariance holds by construction
// (every op computes a token's result without reference to other tokens, in
// a fixed order), so any difference is a bug, never rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <type_traits>

#include "fixture_util.h"
#include "scratch_model.h"
#include "kernels/registry.h"
#include "model/deepseek_v4.h"
#include "util/error.h"

namespace nibble {
namespace {

// BlockWeights::moe points into the block's own vectors: a copy would dangle.
static_assert(!std::is_copy_constructible_v<BlockWeights> && !std::is_copy_assignable_v<BlockWeights>);
static_assert(std::is_nothrow_move_constructible_v<BlockWeights>);

// Every kernel name the host can run (linear and MoE share names), but those
// that are not batch invariant by design (registry.h: batch_variant).
std::vector<std::string> runnable_kernels() {
  const Device host = host_cpu_device(2, 10.0);
  std::vector<std::string> names;
  for (const KernelDesc& k : kernel_registry())
    if (k.op == Op::moe && k.unsupported(host).empty() && !k.batch_variant) names.push_back(k.name);
  return names;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<float> alone;  // [n][V] logits of the sequence fed alone in one step
};

// The fixture's sequences: the longest cut to `max_len`, the others to
// `other_len` (test time), plus a reversed copy of the longest (so that the
// batch has distinct sequences of the same length).
std::vector<Seq> fixture_sequences(const std::string& fixture, int64_t max_len, int64_t other_len = 40) {
  test::Expected exp = test::load_expected(fixture);
  size_t longest = 0;
  for (size_t i = 0; i < exp.sequences.size(); ++i)
    if (exp.sequences[i].tokens.size() > exp.sequences[longest].tokens.size()) longest = i;
  std::vector<Seq> out;
  for (size_t i = 0; i < exp.sequences.size(); ++i) {
    const auto& t = exp.sequences[i].tokens;
    const int64_t len = std::min<int64_t>(i == longest ? max_len : other_len, int64_t(t.size()));
    Seq q;
    q.tokens.assign(t.begin(), t.begin() + len);
    out.push_back(q);
  }
  Seq rev;
  rev.tokens = out[longest].tokens;
  std::reverse(rev.tokens.begin(), rev.tokens.end());
  out.push_back(rev);
  return out;
}

std::vector<float> feed_alone(const Model& m, std::span<const int32_t> tokens) {
  auto st = m.new_state();
  std::vector<float> logits(tokens.size() * size_t(m.vocab_size()));
  m.forward(*st, tokens, logits.data(), true);
  return logits;
}

// First position where two [n][V] logit arrays differ in any bit, or -1.
int64_t first_difference(const float* a, const float* b, int64_t n, int64_t V) {
  for (int64_t t = 0; t < n; ++t)
    if (std::memcmp(a + t * V, b + t * V, size_t(V) * sizeof(float)) != 0) return t;
  return -1;
}

// Feeds every sequence through steps that mix them: each step takes from
// each unfinished sequence (in a shuffled order, some skipped) a random
// chunk of 1..max_chunk tokens. Returns each sequence's logits [n][V].
std::vector<std::vector<float>> feed_mixed(const Model& m, const std::vector<Seq>& seqs, std::mt19937& rng,
                                           int64_t max_chunk) {
  const int64_t V = m.vocab_size();
  std::vector<std::unique_ptr<ModelState>> states;
  std::vector<std::vector<float>> logits(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    states.push_back(m.new_state());
    logits[i].resize(seqs[i].tokens.size() * size_t(V));
  }
  std::vector<size_t> order(seqs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (;;) {
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<SeqStep> batch;
    for (size_t i : order) {
      const int64_t pos = states[i]->position(), n = int64_t(seqs[i].tokens.size());
      if (pos == n || rng() % 4 == 0) continue;  // finished, or sits this step out
      const int64_t take = std::min<int64_t>(n - pos, 1 + int64_t(rng() % uint64_t(max_chunk)));
      SeqStep s;
      s.state = states[i].get();
      s.tokens = std::span<const int32_t>(seqs[i].tokens.data() + pos, size_t(take));
      s.rows = LogitRows::all;
      s.logits = logits[i].data() + pos * V;
      s.id = int64_t(i);
      batch.push_back(s);
    }
    bool done = true;
    for (size_t i = 0; i < seqs.size(); ++i) done = done && states[i]->position() == int64_t(seqs[i].tokens.size());
    if (done) break;
    m.step(batch);
  }
  return logits;
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvariance, MixedBatchesEqualEachSequenceAloneBitwise) {
  const std::string fixture = GetParam();
  for (const std::string& kernel : runnable_kernels()) {
    SCOPED_TRACE(fixture + " with " + kernel);
    LoadOptions opt = test::test_load_options(kernel);
    opt.max_chunk_tokens = 19;  // also splits steps inside Model::step
    auto m = load_model(test::fixture_dir(fixture), opt);
    std::vector<Seq> seqs = fixture_sequences(fixture, 132);  // past the HCA window (128)
    for (Seq& s : seqs) s.alone = feed_alone(*m, s.tokens);
    std::mt19937 rng(1234);
    for (int64_t max_chunk : {3, 40}) {
      auto got = feed_mixed(*m, seqs, rng, max_chunk);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const int64_t n = int64_t(seqs[i].tokens.size());
        EXPECT_EQ(first_difference(got[i].data(), seqs[i].alone.data(), n, m->vocab_size()), -1)
            << "sequence " << i << " (" << n << " tokens), chunks up to " << max_chunk;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::ValuesIn(test::dsv4_fixtures()));

// Positions on and off every boundary of the fixture's caches: the sliding
// window, the CSA (4) and HCA (128) windows.
std::vector<int64_t> boundary_positions(const DeepseekV4Config& cfg, int64_t n) {
  std::vector<int64_t> ps = {0, 1};
  for (int64_t b : {cfg.sliding_window, int64_t(4), int64_t(8), int64_t(128)})
    for (int64_t d : {-1, 0, 1}) ps.push_back(b + d);
  std::vector<int64_t> out;
  for (int64_t p : ps)
    if (p >= 0 && p < n && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

class TruncateFork : public ::testing::TestWithParam<std::string> {};

// Feed A[0, P), truncate to p, feed B (other tokens), truncate to p again,
// feed A[p, P): the logits of A[p, P) equal those of A fed alone, and so does
// the state (checked by what it computes next).
TEST_P(TruncateFork, TruncateThenRefeedEqualsNeverFed) {
  const std::string fixture = GetParam();
  for (int64_t rollback : {int64_t(0), int64_t(16)}) {
    // What is under test is the state; the kernels' own invariance is BatchInvariance's.
    LoadOptions opt = test::test_load_options("auto");
    opt.rollback_tokens = rollback;
    auto mp = load_model(test::fixture_dir(fixture), opt);
    const auto& m = dynamic_cast<const DeepseekV4Model&>(*mp);
    const int64_t V = m.vocab_size();
    std::vector<Seq> seqs = fixture_sequences(fixture, 132);
    const Seq& a = *std::max_element(seqs.begin(), seqs.end(),
                                     [](const Seq& x, const Seq& y) { return x.tokens.size() < y.tokens.size(); });
    const int64_t P = int64_t(a.tokens.size());
    const std::vector<float> ref = feed_alone(m, a.tokens);
    std::vector<int32_t> b(a.tokens.rbegin(), a.tokens.rend());
    std::vector<int64_t> positions = boundary_positions(m.config(), P);
    if (rollback == 0) positions = {m.config().sliding_window, 128};  // every truncation refeeds: a few suffice
    for (int64_t p : positions) {
      SCOPED_TRACE("rollback " + std::to_string(rollback) + ", truncate to " + std::to_string(p));
      // The state at P, and a second one only slightly ahead of p (within rollback).
      for (int64_t ahead : {P - p, std::min<int64_t>(P - p, 3)}) {
        auto st = m.new_state();
        m.forward(*st, std::span<const int32_t>(a.tokens.data(), size_t(p + ahead)), nullptr, false);
        const bool cheap = p >= st->truncate_floor();
        m.truncate(*st, p);
        EXPECT_EQ(st->position(), p);
        m.forward(*st, std::span<const int32_t>(b.data(), 5), nullptr, false);
        m.truncate(*st, p);
        std::vector<float> got(size_t((P - p) * V));
        m.forward(*st, std::span<const int32_t>(a.tokens.data() + p, size_t(P - p)), got.data(), true);
        EXPECT_EQ(first_difference(got.data(), ref.data() + p * V, P - p, V), -1)
            << "fed to " << p + ahead << (cheap ? " (within the floor)" : " (refed)");
      }
    }
  }
}

TEST_P(TruncateFork, ForksEvolveIndependently) {
  const std::string fixture = GetParam();
  auto mp = load_model(test::fixture_dir(fixture), test::test_load_options("auto"));
  const Model& m = *mp;
  const int64_t V = m.vocab_size();
  std::vector<Seq> seqs = fixture_sequences(fixture, 132);
  const Seq& a = *std::max_element(seqs.begin(), seqs.end(),
                                   [](const Seq& x, const Seq& y) { return x.tokens.size() < y.tokens.size(); });
  const int64_t P = int64_t(a.tokens.size()), p = P / 2;
  std::vector<int32_t> ab(a.tokens.begin(), a.tokens.begin() + p);
  ab.insert(ab.end(), a.tokens.rbegin(), a.tokens.rbegin() + (P - p));  // prefix of a, then another tail
  const std::vector<float> ref_a = feed_alone(m, a.tokens), ref_b = feed_alone(m, ab);

  auto st = m.new_state();
  m.forward(*st, std::span<const int32_t>(a.tokens.data(), size_t(p)), nullptr, false);
  const uint64_t before = st->memory_bytes();
  auto other = m.fork(*st);
  EXPECT_EQ(other->position(), p);
  EXPECT_GT(other->memory_bytes(), 0u);
  EXPECT_LE(other->memory_bytes(), before);  // a copy holds the same data, without spare capacity
  std::vector<float> got_a(size_t((P - p) * V)), got_b(got_a.size());
  // Interleaved in one step each time, so they also share steps.
  for (int64_t t = p; t < P; ++t) {
    SeqStep s[2];
    s[0].state = st.get();
    s[0].tokens = std::span<const int32_t>(a.tokens.data() + t, 1);
    s[0].logits = got_a.data() + (t - p) * V;
    s[1].state = other.get();
    s[1].tokens = std::span<const int32_t>(ab.data() + t, 1);
    s[1].logits = got_b.data() + (t - p) * V;
    m.step(s);
  }
  EXPECT_EQ(first_difference(got_a.data(), ref_a.data() + p * V, P - p, V), -1);
  EXPECT_EQ(first_difference(got_b.data(), ref_b.data() + p * V, P - p, V), -1);
  EXPECT_GT(st->memory_bytes(), 0u);
  std::printf("[ %s ] state memory at %lld tokens: %llu bytes\n", fixture.c_str(), (long long)P,
              (unsigned long long)st->memory_bytes());
}

// Bad entries: a clear error naming the sequence and the value, and no state changed.
TEST_P(TruncateFork, BadBatchesChangeNothing) {
  const std::string fixture = GetParam();
  auto mp = load_model(test::fixture_dir(fixture), test::test_load_options("auto"));
  auto other_model = load_model(test::fixture_dir(fixture), test::test_load_options("auto"));
  const Model& m = *mp;
  const int64_t V = m.vocab_size();
  std::vector<Seq> seqs = fixture_sequences(fixture, 30);
  const Seq& a = seqs.back();  // the reversed longest one
  ASSERT_GE(a.tokens.size(), 11u);
  const std::vector<float> ref = feed_alone(m, a.tokens);
  auto s0 = m.new_state(), s1 = m.new_state(), foreign = other_model->new_state();
  m.forward(*s0, std::span<const int32_t>(a.tokens.data(), 10), nullptr, false);
  m.forward(*s1, std::span<const int32_t>(a.tokens.data(), 10), nullptr, false);
  const int32_t good[1] = {a.tokens[10]};
  const int32_t bad_token[1] = {int32_t(V)};
  std::vector<float> out(static_cast<size_t>(V));
  auto expect_error = [&](std::vector<SeqStep> batch, const std::string& needle) {
    try {
      m.step(batch);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(s0->position(), 10);
    EXPECT_EQ(s1->position(), 10);
  };
  auto entry = [&](ModelState* st, std::span<const int32_t> toks, int64_t id) {
    SeqStep s;
    s.state = st;
    s.tokens = toks;
    s.logits = out.data();
    s.id = id;
    return s;
  };
  expect_error({entry(s0.get(), good, 7), entry(s0.get(), good, 8)}, "sequence 8 appears twice");
  expect_error({entry(s0.get(), good, 7), entry(s1.get(), bad_token, 9)},
               "sequence 9: token 0 (id " + std::to_string(V) + ") is outside the vocabulary");
  expect_error({entry(s0.get(), good, 7), entry(foreign.get(), good, 4)}, "sequence 4: its state belongs to another model");
  expect_error({entry(s0.get(), good, 7), entry(nullptr, good, 5)}, "sequence 5: no state");
  SeqStep no_buffer = entry(s1.get(), good, 6);
  no_buffer.logits = nullptr;
  expect_error({entry(s0.get(), good, 7), no_buffer}, "sequence 6: logits wanted but no buffer");
  for (int64_t bad : {int64_t(-1), int64_t(11)}) {
    try {
      m.truncate(*s0, bad);
      ADD_FAILURE() << "no error for truncate to " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("truncate to position " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
  // Both states still compute exactly what they would have.
  std::vector<float> l0(static_cast<size_t>(V)), l1(static_cast<size_t>(V));
  SeqStep ok[2] = {entry(s0.get(), good, 0), entry(s1.get(), good, 1)};
  ok[0].logits = l0.data();
  ok[1].logits = l1.data();
  m.step(ok);
  EXPECT_EQ(std::memcmp(l0.data(), ref.data() + 10 * V, size_t(V) * 4), 0);
  EXPECT_EQ(std::memcmp(l1.data(), ref.data() + 10 * V, size_t(V) * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TruncateFork, ::testing::ValuesIn(test::dsv4_fixtures()));

// A sequence that would run past the context fails the whole step before
// anything runs: the other sequence of the step is untouched.
TEST(BatchStep, PastTheContextChangesNothing) {
  test::ScratchModel scratch;
  scratch.config["max_position_embeddings"] = 12;
  scratch.write_config();
  auto m = load_model(scratch.path(), test::test_load_options("auto"));
  const int64_t V = m->vocab_size();
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  const std::vector<float> ref = feed_alone(*m, std::span<const int32_t>(toks.data(), 11));
  auto a = m->new_state(), b = m->new_state();
  m->forward(*a, std::span<const int32_t>(toks.data(), 10), nullptr, false);
  m->forward(*b, std::span<const int32_t>(toks.data(), 10), nullptr, false);
  std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(3 * V));
  SeqStep s[2];
  s[0].state = a.get();
  s[0].tokens = std::span<const int32_t>(toks.data() + 10, 1);
  s[0].logits = la.data();
  s[0].id = 3;
  s[1].state = b.get();
  s[1].tokens = std::span<const int32_t>(toks.data() + 10, 3);  // 13 > 12
  s[1].logits = lb.data();
  s[1].id = 4;
  try {
    m->step(s);
    ADD_FAILURE() << "no error past the context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 4: it would hold 13 tokens (10 already, 3 more) but the model's "
                                         "context is 12 tokens"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a->position(), 10);
  EXPECT_EQ(b->position(), 10);
  m->step(std::span<const SeqStep>(s, 1));  // sequence 3 alone still computes what it would have
  EXPECT_EQ(std::memcmp(la.data(), ref.data() + 10 * V, size_t(V) * sizeof(float)), 0);
}

// Rows drawn where the logits are (SeqStep::draw) beside rows whose logits
// come back, in one step: each drawn id is kernels/token_draw.h's rule on
// the logits the sequence gets alone (the oracle of this file), and the
// logit rows are unchanged by the draws next to them. Misuse is refused.
TEST(BatchStep, DrawnRowsBesideLogitRows) {
  auto m = load_model(test::fixture_dir("flash_tiny_stock"), test::test_load_options("auto"));
  const int64_t V = m->vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 2, 7}, {1, 3}, {8, 8, 4, 6, 11}};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(feed_alone(*m, p));
  auto last_row = [&](size_t i) { return alone[i].data() + (prompts[i].size() - 1) * size_t(V); };
  DrawParams greedy;
  greedy.temperature = 0;
  DrawParams warm;
  warm.temperature = 0.7f;
  warm.top_k = 40;
  warm.u = 0.61;
  std::vector<std::unique_ptr<ModelState>> st;
  for (size_t i = 0; i < prompts.size(); ++i) st.push_back(m->new_state());
  std::vector<float> logits1(static_cast<size_t>(V));
  int32_t drawn0 = -1, drawn2 = -1;
  SeqStep s[3];
  for (size_t i = 0; i < 3; ++i) {
    s[i].state = st[i].get();
    s[i].tokens = prompts[i];
    s[i].id = int64_t(i);
  }
  s[0].draw = &warm;
  s[0].drawn = &drawn0;
  s[1].logits = logits1.data();
  s[2].draw = &greedy;
  s[2].drawn = &drawn2;
  m->step(s);
  EXPECT_EQ(drawn0, draw_token(last_row(0), V, warm));
  EXPECT_EQ(drawn2, argmax(last_row(2), V));
  EXPECT_EQ(std::memcmp(logits1.data(), last_row(1), size_t(V) * sizeof(float)), 0);

  // A draw wants the last row alone, no logits buffer and a place for its id.
  auto refused = [&](SeqStep bad) {
    bad.state = st[1].get();
    bad.tokens = prompts[1];
    bad.id = 9;
    try {
      m->step(std::span<const SeqStep>(&bad, 1));
      ADD_FAILURE() << "a bad draw was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sequence 9: a drawn token needs rows = last"), std::string::npos)
          << e.what();
    }
  };
  const int64_t pos = st[1]->position();
  SeqStep all;
  all.rows = LogitRows::all;
  all.draw = &warm;
  all.drawn = &drawn0;
  refused(all);
  SeqStep no_id;
  no_id.draw = &warm;
  refused(no_id);
  SeqStep both;
  both.draw = &warm;
  both.drawn = &drawn0;
  both.logits = logits1.data();
  refused(both);
  EXPECT_EQ(st[1]->position(), pos);
}

}  // namespace
}  // namespace nibble
