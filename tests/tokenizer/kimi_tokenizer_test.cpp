// Kimi K2's tiktoken tokenizer (tiktoken.model + tokenizer_config.json)
// against `tiktoken` itself: tools/gen_kimi_tokenizer.py wrote a ranking of
// o200k's lowest 20,000 ranks, Kimi's 256 specials after them, and the ids
// tiktoken gives (through Kimi's encode() cuts) for 1,600 strings: CJK with
// kana and CJK punctuation, case splits, contractions, digits, emoji,
// whitespace runs, specials, runs over 25,000 characters. Decode of random
// ids (cut UTF-8 included) against tiktoken's errors="replace". Then the
// loader's errors on broken files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fixtures.h"
#include "tokenizer/regex.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tiktoken_model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using test::ids_of;
using test::shown;

std::string kimi_dir() { return test::fixture_path("kimi"); }

class KimiTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::from_model_dir(kimi_dir()));
    data_ = new nlohmann::json(test::read_fixture("kimi_cases.json"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete data_;
    tok_ = nullptr;
    data_ = nullptr;
  }
  static Tokenizer* tok_;
  static nlohmann::json* data_;
};
Tokenizer* KimiTokenizer::tok_ = nullptr;
nlohmann::json* KimiTokenizer::data_ = nullptr;

TEST_F(KimiTokenizer, SpecialsFollowTheRanksAsKimiNumbersThem) {
  // Kimi K2: [BOS] 163584 = len(ranks), <|im_end|> +2, <|im_middle|> +17,
  // [PAD] +255; unnamed ids are <|reserved_token_{id}|>.
  const int32_t n = (*data_)["n_base"];
  ASSERT_EQ(n, 20000);
  const std::pair<const char*, int32_t> specials[] = {
      {"[BOS]", 0},          {"[EOS]", 1},          {"<|im_end|>", 2},           {"<|im_user|>", 3},
      {"<|im_assistant|>", 4}, {"<|im_system|>", 10}, {"<|tool_calls_section_begin|>", 11},
      {"<|tool_call_begin|>", 13}, {"<|tool_call_argument_begin|>", 14}, {"<|tool_call_end|>", 15},
      {"<|im_middle|>", 17}, {"[UNK]", 254},        {"[PAD]", 255}};
  for (const auto& [text, offset] : specials) {
    EXPECT_EQ(tok_->token_id(text), n + offset) << text;
    EXPECT_TRUE(tok_->is_special(n + offset)) << text;
  }
  EXPECT_EQ(tok_->token_id("<|reserved_token_20005|>"), n + 5);
  EXPECT_EQ(tok_->vocab_size(), size_t(n) + 256);
  EXPECT_EQ(tok_->token_text(tok_->encode(" the")[0]), "Ġthe");  // the byte-map form Kimi's decoder table uses
}

TEST_F(KimiTokenizer, EncodeMatchesTiktoken) {
  const auto& cases = (*data_)["cases"];
  ASSERT_GE(cases.size(), 1500u);
  size_t failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> got = tok_->encode(text);
    EXPECT_EQ(got, ids_of(c["ids"])) << "text " << shown(text.substr(0, 200));
    if (got != ids_of(c["ids"]) && ++failures > 20) FAIL() << "too many failures";
  }
}

TEST_F(KimiTokenizer, EncodeWithSpecialsOffMatchesDisallowedNone) {
  size_t differing = 0;
  for (const auto& c : (*data_)["cases"]) {
    const std::string text = c["text"];
    const auto expect = ids_of(c.contains("ids_no_special") ? c["ids_no_special"] : c["ids"]);
    differing += c.contains("ids_no_special");
    EXPECT_EQ(tok_->encode(text, /*allow_special=*/false), expect) << "text " << shown(text.substr(0, 200));
  }
  EXPECT_GT(differing, 50u);  // the corpus really holds special tokens
}

TEST_F(KimiTokenizer, DecodeRoundTripsAndStreams) {
  size_t held_back = 0;
  for (const auto& c : (*data_)["cases"]) {
    const std::string text = c["text"];
    const auto ids = ids_of(c["ids"]);
    EXPECT_EQ(tok_->decode(ids), text) << "text " << shown(text.substr(0, 200));
    StreamDecoder sd(*tok_);
    std::string streamed;
    for (int32_t id : ids) {
      streamed += sd.push(id);
      held_back += sd.pending_bytes() > 0;
    }
    streamed += sd.finish();
    EXPECT_EQ(streamed, text) << "text " << shown(text.substr(0, 200));
  }
  EXPECT_GT(held_back, 100u);  // a 20,000-token vocabulary splits most CJK characters
}

TEST_F(KimiTokenizer, DecodeOfRandomIdsMatchesTiktokenReplace) {
  size_t with_replacement = 0;
  for (const auto& d : (*data_)["decodes"]) {
    const auto ids = ids_of(d["ids"]);
    const std::string text = d["text"];
    with_replacement += text.find("\xEF\xBF\xBD") != std::string::npos;
    EXPECT_EQ(tok_->decode(ids), text);
  }
  EXPECT_GT(with_replacement, 50u);  // half the ids were drawn from multi-byte tokens
}

TEST(KimiEncodeCuts, CutsLongRunsAsKimisEncodeDoes) {
  // Runs of more than 25,000 characters of one kind are cut every 25,000;
  // a change of kind restarts the count. Characters, not bytes: 中 is 3.
  const std::string spaces(25'001, ' ');
  auto cuts = kimi_encode_cuts(spaces + "x");
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[0].size(), 25'000u);
  EXPECT_EQ(cuts[1], " x");
  std::string han;
  for (int i = 0; i < 25'001; ++i) han += "中";
  cuts = kimi_encode_cuts(han);
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[1], "中");
  EXPECT_EQ(kimi_encode_cuts(std::string(25'000, 'a') + " " + std::string(25'000, 'b')).size(), 1u);
  EXPECT_TRUE(kimi_encode_cuts("").empty());
  // \x1c is space to Python's str.isspace (and so to Kimi), U+200B is not.
  EXPECT_EQ(kimi_encode_cuts(std::string(25'000, 'a') + "\x1c").size(), 1u);
  EXPECT_EQ(kimi_encode_cuts(std::string(25'000, 'a') + "\xE2\x80\x8B").size(), 2u);
}

TEST(RustRegexToPcre2, IntersectionsBecomeLookaheadsAndScriptsScript) {
  EXPECT_EQ(rust_regex_to_pcre2(R"([\p{L}&&[^\p{Han}]]+)", "t"), R"((?:(?=[^\p{sc:Han}])[\p{L}])+)");
  EXPECT_EQ(rust_regex_to_pcre2(R"([a-z&&[^aeiou]&&[a-m]])", "t"), R"((?:(?=[^aeiou])(?=[a-m])[a-z]))");
  EXPECT_EQ(rust_regex_to_pcre2(R"(\[a&&b\]|[&]|[\]a&&b])", "t"), R"(\[a&&b\]|[&]|(?:(?=[b])[\]a]))");
  EXPECT_EQ(rust_regex_to_pcre2(R"([^\r\n\p{L}\p{N}]?\P{Lu}\p{sc=Greek}\P{Greek})", "t"),
            R"([^\r\n\p{L}\p{N}]?\P{Lu}\p{sc=Greek}\P{sc:Greek})");
  EXPECT_THROW(rust_regex_to_pcre2("[^a&&b]", "t"), Error);
  EXPECT_THROW(rust_regex_to_pcre2("[abc", "t"), Error);
  EXPECT_THROW(rust_regex_to_pcre2("[a&&]", "t"), Error);
  // The translated class does what the intersection says.
  Regex re(rust_regex_to_pcre2(R"([\p{Lo}&&[^\p{Han}]]+)", "t"), false, "t");
  std::vector<Span> m;
  re.find_all("ひら中がな", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].end - m[0].begin, 6u);
  EXPECT_EQ(m[1].begin, 9u);
  // Script, not Script_Extensions: U+3001 、 and U+31C5 ㇅ are not Han
  // to Rust's regex (tiktoken keeps 中、文 as three pieces).
  Regex han(rust_regex_to_pcre2(R"([\p{Han}]+)", "t"), false, "t");
  m.clear();
  han.find_all("中、文㇅", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].end, 3u);
}

// ---------------------------------------------------------------- bad files

class KimiBadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nibble_kimi_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    ranks_ = test::read_text(kimi_dir() + "/tiktoken.model");
    config_ = test::read_text(kimi_dir() + "/tokenizer_config.json");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes the two files and returns the load error ("" if it loads).
  std::string load_error(const std::string& ranks, const std::string& config) {
    std::ofstream(dir_ / "tiktoken.model", std::ios::binary) << ranks;
    std::ofstream(dir_ / "tokenizer_config.json", std::ios::binary) << config;
    try {
      Tokenizer::from_model_dir(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // The ranks file with line `line` (1-based) replaced.
  std::string with_line(size_t line, const std::string& text) const {
    size_t pos = 0;
    for (size_t i = 1; i < line; ++i) pos = ranks_.find('\n', pos) + 1;
    const size_t end = ranks_.find('\n', pos);
    return ranks_.substr(0, pos) + text + ranks_.substr(end);
  }
  std::filesystem::path dir_;
  std::string ranks_, config_;
};

TEST_F(KimiBadFiles, GoodFilesLoad) { EXPECT_EQ(load_error(ranks_, config_), ""); }

TEST_F(KimiBadFiles, CorruptBase64NamesTheLine) {
  const std::string e = load_error(with_line(300, "ab$= 299"), config_);
  EXPECT_NE(e.find("line 300"), std::string::npos) << e;
  EXPECT_NE(e.find("not valid base64"), std::string::npos) << e;
  EXPECT_NE(load_error(with_line(7, "YWJ 6"), config_).find("line 7"), std::string::npos);  // bad length
}

TEST_F(KimiBadFiles, DuplicateAndMissingRanksAreNamed) {
  // Line 11 holds rank 10; giving it rank 9 repeats line 10's.
  std::string e = load_error(with_line(11, "Kw== 9"), config_);
  EXPECT_NE(e.find("rank 9 is also on line 10"), std::string::npos) << e;
  e = load_error(with_line(5, "JQ== 99999"), config_);
  EXPECT_NE(e.find("line 5: rank 99999"), std::string::npos) << e;
  e = load_error(with_line(5, "Cw=="), config_);
  EXPECT_NE(e.find("line 5: expected \"base64 rank\""), std::string::npos) << e;
  e = load_error(with_line(5, "JQ== x4"), config_);
  EXPECT_NE(e.find("line 5: rank 'x4'"), std::string::npos) << e;
}

TEST_F(KimiBadFiles, RepeatedTokenIsNamed) {
  // Line 1 is rank 0 ("!"); the same bytes on line 6 as rank 5.
  const std::string first = ranks_.substr(0, ranks_.find(' '));
  const std::string e = load_error(with_line(6, first + " 5"), config_);
  EXPECT_NE(e.find("line 6: the token of line 1 again"), std::string::npos) << e;
}

TEST_F(KimiBadFiles, MissingSpecialsAreRefused) {
  nlohmann::json cfg = nlohmann::json::parse(config_);
  nlohmann::json no_decoder = cfg;
  no_decoder.erase("added_tokens_decoder");
  EXPECT_NE(load_error(ranks_, no_decoder.dump()).find("added_tokens_decoder: missing"), std::string::npos);
  nlohmann::json bad_bos = cfg;
  bad_bos["bos_token"] = "<|begin|>";
  EXPECT_NE(load_error(ranks_, bad_bos.dump()).find("bos_token '<|begin|>' is not one of the special tokens"),
            std::string::npos);
  nlohmann::json out_of_range = cfg;
  out_of_range["added_tokens_decoder"]["19999"] = {{"content", "<x>"}, {"special", true}};
  EXPECT_NE(load_error(ranks_, out_of_range.dump()).find("id 19999 is outside the special ids 20000..20255"),
            std::string::npos);
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  try {
    Tokenizer::from_model_dir(dir_.string());
    ADD_FAILURE() << "loaded without tokenizer_config.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs tokenizer_config.json"), std::string::npos) << e.what();
  }
}

TEST_F(KimiBadFiles, MissingByteTokenIsRefused) {
  // The byte 0x0B ("Cw==") swapped for a fresh three-byte token: the ranks
  // stay 0..n-1 and only the byte is missing.
  const size_t at = ranks_.find("Cw== ");
  ASSERT_NE(at, std::string::npos);
  const size_t end = ranks_.find('\n', at);
  const std::string rank = ranks_.substr(at + 5, end - at - 5);
  const std::string changed = ranks_.substr(0, at) + "/////w== " + rank + ranks_.substr(end);
  const std::string e = load_error(changed, config_);
  EXPECT_NE(e.find("no token for the byte 0x0B"), std::string::npos) << e;
}

}  // namespace
}  // namespace nibble
