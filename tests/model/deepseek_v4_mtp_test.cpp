// DeepSeek-V4's MTP layer vs the torch reference of tools/gen_dsv4_mtp_fixtures.py
// (the spec's MTPBlock on transformers' modules): the main forward's hidden
// output (the streams before hc_head) feeds Model::draft_step, whose logits
// must match the oracle's, for whole sequences (fed at once and row by row)
// and for chained drafts (draft j + 1 reads draft j's own output streams).
// Also: the draft state forks and truncates like the main state, and a
// checkpoint without a usable MTP layer loads without a draft, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture_util.h"
#include "runtime/sampler.h"
#include "scratch_model.h"
#include "util/error.h"

namespace nibble {
namespace {

// The same bound as the main logits vs transformers (deepseek_v4_hf_test.cpp):
// f32 on both sides, different summation orders; the MTP logit ends a chain
// of the main model's dot products (its streams are the input) plus one more
// block's (~12 dot products of length <= 1,024, ~sqrt(K) u = 1.9e-6 relative
// each), so 1e-5 of the position's largest |logit| still allows ~5 to line
// up. A wrong wiring (hnorm over the flattened streams instead of per stream,
// a missing enorm, the main hc_head instead of the MTP's, the wrong position
// for the block's RoPE) moves logits by >= 1e-2 relative.
constexpr double kRelTol = 1e-5;

using test::MtpOracle;

MtpOracle load_oracle(const std::string& name) {
  return test::load_mtp_oracle(test::fixture_dir(name) + "/expected/mtp/");
}

// The main model's streams before hc_head of every token of `tokens`: [n][hidden_width].
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

const std::vector<std::string>& mtp_fixtures() {
  static const std::vector<std::string> names = {"flash_tiny_stock", "flash_tiny_nvfp4"};
  return names;
}

class DeepseekV4Mtp : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV4Mtp, SequenceLogitsMatchReference) {
  const std::string name = GetParam();
  auto model = load_model(test::fixture_dir(name), test::test_load_options());
  ASSERT_TRUE(model->has_draft()) << model->draft_unavailable();
  MtpOracle o = load_oracle(name);
  const int64_t V = o.vocab, W = model->hidden_width();
  for (size_t i = 0; i < o.seqs.size(); ++i) {
    const auto& q = o.seqs[i];
    const int64_t rows = int64_t(q.tokens.size()) - 1;
    std::vector<float> hidden = main_hidden(*model, q.tokens);
    std::span<const int32_t> next(q.tokens.data() + 1, size_t(rows));
    // All rows at once.
    std::vector<float> logits(size_t(rows * V));
    auto ds = model->new_draft_state();
    DraftStep d;
    d.state = ds.get();
    d.tokens = next;
    d.hidden = hidden.data();
    d.rows = LogitRows::all;
    d.logits = logits.data();
    model->draft_step(std::span<const DraftStep>(&d, 1));
    EXPECT_EQ(ds->position(), rows);
    test::Comparison c = test::compare_logits(logits.data(), q.logits.data(), rows, V, kRelTol);
    std::printf("[ %s ] MTP sequence %zu (%lld rows): max rel err %.3g at row %lld\n", name.c_str(), i,
                (long long)rows, c.max_err, (long long)c.worst_position);
    EXPECT_LE(c.max_err, kRelTol) << name << " sequence " << i << " row " << c.worst_position;
    EXPECT_EQ(c.argmax_mismatches, 0);
    // Row by row (decode): bit-identical to the rows fed at once.
    auto ds2 = model->new_draft_state();
    std::vector<float> one(static_cast<size_t>(V));
    for (int64_t r = 0; r < rows; ++r) {
      DraftStep e;
      e.state = ds2.get();
      e.tokens = next.subspan(size_t(r), 1);
      e.hidden = hidden.data() + r * W;
      e.logits = one.data();
      model->draft_step(std::span<const DraftStep>(&e, 1));
      ASSERT_EQ(0, std::memcmp(one.data(), logits.data() + r * V, size_t(V) * 4)) << name << " row " << r;
    }
  }
}

TEST_P(DeepseekV4Mtp, ChainedDraftsMatchReference) {
  const std::string name = GetParam();
  auto model = load_model(test::fixture_dir(name), test::test_load_options());
  MtpOracle o = load_oracle(name);
  const int64_t V = o.vocab, W = model->hidden_width();
  for (const auto& ch : o.chains) {
    const auto& toks = o.seqs[size_t(ch.sequence)].tokens;
    const int64_t P = ch.prefix;
    // The main model has read tokens 0 .. P-1; token P is the next one.
    std::vector<float> hidden = main_hidden(*model, std::span<const int32_t>(toks.data(), size_t(P)));
    auto ds = model->new_draft_state();
    // Rows 0 .. P-2 (main streams, tokens 1 .. P-1) fill the window; row P-1
    // (streams of P-1, token P) is draft 1.
    std::vector<float> own(static_cast<size_t>(W)), logits(static_cast<size_t>(V));
    DraftStep d;
    d.state = ds.get();
    d.tokens = std::span<const int32_t>(toks.data() + 1, size_t(P));
    d.hidden = hidden.data();
    d.logits = logits.data();
    d.hidden_out = own.data();
    model->draft_step(std::span<const DraftStep>(&d, 1));
    for (size_t j = 0; j < ch.drafts.size(); ++j) {
      test::Comparison c = test::compare_logits(logits.data(), ch.logits.data() + j * size_t(V), 1, V, kRelTol);
      std::printf("[ %s ] chain prefix %lld draft %zu: rel err %.3g\n", name.c_str(), (long long)P, j + 1, c.max_err);
      EXPECT_LE(c.max_err, kRelTol) << name << " prefix " << P << " draft " << j + 1;
      const int32_t drafted = argmax(logits.data(), V);
      ASSERT_EQ(drafted, ch.drafts[j]) << name << " prefix " << P << " draft " << j + 1;
      if (j + 1 == ch.drafts.size()) break;
      std::vector<float> in = own;  // draft j + 1 reads draft j's own output streams
      DraftStep e;
      e.state = ds.get();
      const int32_t tok[1] = {drafted};
      e.tokens = tok;
      e.hidden = in.data();
      e.logits = logits.data();
      e.hidden_out = own.data();
      model->draft_step(std::span<const DraftStep>(&e, 1));
    }
  }
}

// Draft states fork and truncate like main states: after truncating back k
// rows and feeding other rows, the logits equal a fresh state fed the same.
TEST_P(DeepseekV4Mtp, DraftStateForksAndTruncates) {
  const std::string name = GetParam();
  auto model = load_model(test::fixture_dir(name), test::test_load_options());
  MtpOracle o = load_oracle(name);
  const int64_t V = o.vocab, W = model->hidden_width();
  const auto& toks = o.seqs[1].tokens;
  const int64_t n = 40;
  std::vector<float> hidden = main_hidden(*model, std::span<const int32_t>(toks.data(), size_t(n + 1)));
  auto feed = [&](ModelState& st, int64_t r0, int64_t r1, const float* h, const int32_t* next, float* logits) {
    DraftStep d;
    d.state = &st;
    d.tokens = std::span<const int32_t>(next, size_t(r1 - r0));
    d.hidden = h;
    d.logits = logits;
    model->draft_step(std::span<const DraftStep>(&d, 1));
  };
  std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
  // Reference: rows 0 .. n-1 as in the oracle.
  auto ref = model->new_draft_state();
  feed(*ref, 0, n, hidden.data(), toks.data() + 1, want.data());
  // Rows 0 .. n-4, then 3 rows of other input (another sequence's streams and
  // tokens), truncated away, then the true last 3 rows.
  auto st = model->new_draft_state();
  feed(*st, 0, n - 3, hidden.data(), toks.data() + 1, got.data());
  auto forked = model->fork(*st);
  std::vector<int32_t> junk = {5, 6, 7};
  feed(*st, n - 3, n, hidden.data() + 7 * W, junk.data(), got.data());
  EXPECT_LE(st->truncate_floor(), n - 3);
  model->truncate(*st, n - 3);
  EXPECT_EQ(st->position(), n - 3);
  feed(*st, n - 3, n, hidden.data() + (n - 3) * W, toks.data() + 1 + (n - 3), got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(V) * 4));
  // The fork never saw the junk.
  feed(*forked, n - 3, n, hidden.data() + (n - 3) * W, toks.data() + 1 + (n - 3), got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(V) * 4));
  // Below the floor the draft state cannot refeed (it keeps no inputs): a clear error.
  try {
    model->truncate(*st, 0);
    if (st->truncate_floor() > 0) ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MTP draft state"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV4Mtp, ::testing::ValuesIn(mtp_fixtures()));

// The main forward's hidden output is the same whatever rows were asked for
// and however the prompt was chunked.
TEST(DeepseekV4Hidden, RowsAndChunksAgree) {
  LoadOptions opt = test::test_load_options();
  opt.max_chunk_tokens = 7;
  auto chunked = load_model(test::fixture_dir("flash_tiny_stock"), opt);
  auto whole = load_model(test::fixture_dir("flash_tiny_stock"), test::test_load_options());
  MtpOracle o = load_oracle("flash_tiny_stock");
  const auto& toks = o.seqs[0].tokens;
  const int64_t n = int64_t(toks.size()), W = whole->hidden_width();
  std::vector<float> all = main_hidden(*whole, toks);
  auto st = chunked->new_state();
  std::vector<float> tail(size_t((n - 11) * W));
  SeqStep s;
  s.state = st.get();
  s.tokens = toks;
  s.rows = LogitRows::none;
  s.hidden = tail.data();
  s.hidden_first = 11;
  chunked->step(std::span<const SeqStep>(&s, 1));
  EXPECT_EQ(0, std::memcmp(tail.data(), all.data() + 11 * W, tail.size() * 4));
  s.hidden_first = n + 1;
  EXPECT_THROW(chunked->step(std::span<const SeqStep>(&s, 1)), Error);
}

// Rewrites tensor `name`'s shape in its shard's header (same byte count).
void reshape_tensor(const test::ScratchModel& m, const std::string& name, const std::vector<int64_t>& shape) {
  namespace fs = std::filesystem;
  std::ifstream in(fs::path(m.path()) / "model.safetensors.index.json");
  const std::string shard = nlohmann::json::parse(in).at("weight_map").at(name).get<std::string>();
  const fs::path file = fs::path(m.path()) / shard;
  std::vector<char> bytes;
  {
    std::ifstream f(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(std::string(bytes.data() + 8, size_t(n)));
  header.at(name)["shape"] = shape;
  const std::string h = header.dump();
  const uint64_t hn = h.size();
  std::ofstream o(file, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(&hn), 8);
  o.write(h.data(), std::streamsize(h.size()));
  o.write(bytes.data() + 8 + n, std::streamsize(bytes.size() - 8 - n));
}

// The model loads without a draft; the reason names `what`; draft use fails with it.
void expect_no_draft(const std::string& path, const std::string& what) {
  auto model = load_model(path, test::test_load_options());
  EXPECT_FALSE(model->has_draft());
  const std::string why = model->draft_unavailable();
  EXPECT_NE(why.find(what), std::string::npos) << why;
  try {
    model->new_draft_state();
    ADD_FAILURE() << "new_draft_state without a draft layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
  // The main model still runs.
  auto st = model->new_state();
  const int32_t toks[3] = {0, 5, 6};
  std::vector<float> logits(size_t(model->vocab_size()));
  model->forward(*st, toks, logits.data(), false);
  EXPECT_TRUE(std::isfinite(logits[0]));
}

TEST(DeepseekV4MtpErrors, MissingLayer) {
  test::ScratchModel m("flash_tiny_stock");
  std::ifstream in(test::fixture_dir("flash_tiny_stock") + "/model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it)
    if (it.key().rfind("mtp.", 0) == 0) m.drop_tensor(it.key());
  expect_no_draft(m.path(), "no mtp.0.* tensors");
}

TEST(DeepseekV4MtpErrors, PartialLayer) {
  test::ScratchModel m("flash_tiny_stock");
  m.drop_tensor("mtp.0.hnorm.weight");
  expect_no_draft(m.path(), "mtp.0.hnorm.weight is missing");
}

TEST(DeepseekV4MtpErrors, WrongShape) {
  test::ScratchModel m("flash_tiny_stock");
  reshape_tensor(m, "mtp.0.enorm.weight", {80, 2});
  expect_no_draft(m.path(), "mtp.0.enorm.weight has shape [80, 2]");
}

TEST(DeepseekV4MtpErrors, ConfigWithoutMtp) {
  expect_no_draft(test::fixture_dir("hf_tiny_fp8experts"), "num_nextn_predict_layers is 0");
}

}  // namespace
}  // namespace nibble
