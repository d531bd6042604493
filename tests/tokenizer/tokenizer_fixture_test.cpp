// Encode/decode against the `tokenizers` library: every string of the
// committed fixtures (tools/gen_tokenizer_fixtures.py) must give exactly the
// ids tokenizers gave, and decode back to the text tokenizers decoded.
#include <gtest/gtest.h>

#include <thread>

#include "fixtures.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::ids_of;
using test::read_fixture;
using test::shown;

struct Fixture {
  const char* cases;
  const char* tokenizer;
};
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.cases; }

class TokenizerFixture : public ::testing::TestWithParam<Fixture> {
 protected:
  void SetUp() override {
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_file(test::fixture_path(GetParam().tokenizer)));
    data_ = read_fixture(GetParam().cases);
  }
  std::unique_ptr<Tokenizer> tok_;
  nlohmann::json data_;
};

TEST_P(TokenizerFixture, EncodeMatchesTokenizersLibrary) {
  const auto& cases = data_["cases"];
  ASSERT_GE(cases.size(), 1000u);
  size_t failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> expect = ids_of(c["ids"]);
    const std::vector<int32_t> got = tok_->encode(text);
    EXPECT_EQ(got, expect) << "text " << shown(text);
    if (got != expect && ++failures > 20) FAIL() << "too many failures";
  }
}

TEST_P(TokenizerFixture, EncodeWithSpecialsDisabledMatchesEncodeSpecialTokensMode) {
  size_t differing = 0;
  for (const auto& c : data_["cases"]) {
    const std::string text = c["text"];
    const auto expect = ids_of(c.contains("ids_no_special") ? c["ids_no_special"] : c["ids"]);
    differing += c.contains("ids_no_special");
    EXPECT_EQ(tok_->encode(text, /*allow_special=*/false), expect) << "text " << shown(text);
  }
  EXPECT_GT(differing, 50u);  // the fixture really exercises special tokens
}

TEST_P(TokenizerFixture, DecodeRoundTrips) {
  for (const auto& c : data_["cases"]) {
    const std::string text = c["text"];
    const auto ids = ids_of(c["ids"]);
    // Byte-level BPE is lossless except where lstrip/rstrip tokens absorbed
    // spaces; the fixture then records what tokenizers decodes.
    const std::string expect = c.contains("decoded") ? c["decoded"].get<std::string>() : text;
    EXPECT_EQ(tok_->decode(ids), expect) << "text " << shown(text);
    const std::string expect_skip =
        c.contains("decoded_skip_special") ? c["decoded_skip_special"].get<std::string>() : expect;
    EXPECT_EQ(tok_->decode(ids, /*skip_special=*/true), expect_skip) << "text " << shown(text);
  }
}

TEST_P(TokenizerFixture, DecodeOfRandomIdsMatchesLossyUtf8) {
  // Random ids often split characters or form ill-formed UTF-8; tokenizers
  // replaces each maximal ill-formed subpart by U+FFFD.
  size_t with_replacement = 0;
  for (const auto& d : data_["decodes"]) {
    const auto ids = ids_of(d["ids"]);
    const std::string text = d["text"];
    with_replacement += text.find("\xEF\xBF\xBD") != std::string::npos;
    EXPECT_EQ(tok_->decode(ids), text);
    EXPECT_EQ(tok_->decode(ids, true), d["text_skip_special"].get<std::string>());
  }
  EXPECT_GT(with_replacement, 20u);
}

TEST_P(TokenizerFixture, TokenIdAndTextAgree) {
  for (int32_t id = 0; id < static_cast<int32_t>(tok_->vocab_size()); ++id) {
    if (!tok_->has_id(id)) continue;
    const auto back = tok_->token_id(tok_->token_text(id));
    ASSERT_TRUE(back.has_value()) << "id " << id;
    EXPECT_EQ(*back, id);
  }
  EXPECT_FALSE(tok_->token_id("definitely not a token \x01").has_value());
  EXPECT_THROW(tok_->decode(std::vector<int32_t>{static_cast<int32_t>(tok_->vocab_size())}), Error);
  EXPECT_THROW(tok_->decode(std::vector<int32_t>{-1}), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixture,
                         ::testing::Values(Fixture{"dsv4_cases.json", "dsv4_tokenizer.json"},
                                           Fixture{"gpt2_cases.json", "gpt2_tokenizer.json"},
                                           // DeepSeek-V3's pipeline and added tokens (gen_dsv3_tok_fixtures.py)
                                           Fixture{"dsv3_cases.json", "dsv3_tokenizer.json"}),
                         [](const auto& info) { return std::string(info.param.cases).substr(0, 4); });

TEST(TokenizerDsv4, SpecialTokenIds) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("dsv4_tokenizer.json"));
  EXPECT_EQ(tok.token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.token_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_TRUE(tok.is_special(0));
  const auto user = tok.token_id("<｜User｜>");
  ASSERT_TRUE(user.has_value());
  EXPECT_FALSE(tok.is_special(*user));  // DeepSeek marks role tokens non-special
  EXPECT_EQ(tok.encode("<｜User｜>"), std::vector<int32_t>{*user});
}

TEST(TokenizerGpt2, Variants) {
  // The same file patched (ByteLevel add_prefix_space=true: the prefix goes
  // on every segment between added tokens; BPE ignore_merges=true with two
  // vocabulary words no merge builds) against tokenizers on the same patch.
  const auto data = read_fixture("gpt2_cases.json");
  ASSERT_EQ(data["variants"].size(), 2u);
  for (const auto& v : data["variants"]) {
    SCOPED_TRACE(v["name"].get<std::string>());
    auto j = nlohmann::json::parse(test::read_text(test::fixture_path("gpt2_tokenizer.json")));
    j.merge_patch(v["patch"]);
    const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "gpt2 variant");
    ASSERT_GE(v["cases"].size(), 200u);
    for (const auto& c : v["cases"]) {
      const std::string text = c["text"];
      EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << "text " << shown(text);
    }
  }
}

TEST(TokenizerGpt2, MergesAsSpaceSeparatedStrings) {
  // Older tokenizer.json files (DeepSeek's among them) write merges as
  // "a b" strings; both forms must load to the same model.
  auto j = nlohmann::json::parse(test::read_text(test::fixture_path("gpt2_tokenizer.json")));
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "gpt2 string merges");
  const auto data = read_fixture("gpt2_cases.json");
  for (const auto& c : data["cases"]) {
    EXPECT_EQ(tok.encode(c["text"].get<std::string>()), ids_of(c["ids"]));
  }
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  // One Tokenizer shared by several threads (its word cache is shared).
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("dsv4_tokenizer.json"));
  const auto data = read_fixture("dsv4_cases.json");
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expect;
  for (const auto& c : data["cases"]) {
    texts.push_back(c["text"]);
    expect.push_back(ids_of(c["ids"]));
  }
  std::vector<size_t> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < texts.size(); ++k) {
        const size_t i = (k * 7 + t * 131) % texts.size();  // different orders per thread
        mismatches[t] += tok.encode(texts[i]) != expect[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t m : mismatches) EXPECT_EQ(m, 0u);
}

TEST(Tokenizer, RejectsInvalidUtf8Input) {
  const Tokenizer tok = Tokenizer::from_file(test::fixture_path("gpt2_tokenizer.json"));
  EXPECT_THROW(tok.encode("ok \xC3"), Error);
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), Error);  // a UTF-8-encoded surrogate
  EXPECT_THROW(tok.encode("\xFF"), Error);
  EXPECT_TRUE(tok.encode("").empty());
}

}  // namespace
}  // namespace nibble
