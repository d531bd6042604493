// gpt-oss's tokenizer.json (o200k, rebuilt by tools/gen_gptoss_tokenizer.py
// and unpacked by CMake into <build>/gptoss-tokenizer/) against tiktoken:
// every string of gptoss_cases.json must encode to tiktoken's ids and decode
// back, and random ids must decode as tiktoken's errors="replace" does.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "fixtures.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace nibble {
namespace {

using test::ids_of;
using test::shown;

// One load for the whole suite: the file is 27 MB (about a second to parse).
class GptOssTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::gptoss_tokenizer_dir() + "/tokenizer.json";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: CMake unpacks "
                                               << "tests/fixtures/tokenizer/gptoss_tokenizer.tar.xz there at configure";
    const auto t0 = std::chrono::steady_clock::now();
    tok_ = new Tokenizer(Tokenizer::from_file(path));
    load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    data_ = new nlohmann::json(test::read_fixture("gptoss_cases.json"));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete data_;
    tok_ = nullptr;
    data_ = nullptr;
  }
  static Tokenizer* tok_;
  static nlohmann::json* data_;
  static double load_s_;
};
Tokenizer* GptOssTokenizer::tok_ = nullptr;
nlohmann::json* GptOssTokenizer::data_ = nullptr;
double GptOssTokenizer::load_s_ = 0;

TEST_F(GptOssTokenizer, HasThePublishedIds) {
  // The ids of the published tokenizer_config.json (and tiktoken's
  // o200k_harmony); the vocabulary is o200k_base's 199,998 ranks.
  const std::pair<const char*, int32_t> specials[] = {
      {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002}, {"<|constrain|>", 200003},
      {"<|channel|>", 200005},     {"<|start|>", 200006},     {"<|end|>", 200007},    {"<|message|>", 200008},
      {"<|call|>", 200012},        {"<|endofprompt|>", 200018}};
  for (const auto& [text, id] : specials) {
    EXPECT_EQ(tok_->token_id(text), id) << text;
    EXPECT_TRUE(tok_->is_special(id)) << text;
  }
  EXPECT_EQ(tok_->vocab_size(), 200019u);
  EXPECT_FALSE(tok_->token_id("<|reserved_200019|>").has_value());
  RecordProperty("load_seconds", std::to_string(load_s_));
  std::printf("[ tokenizer ] gpt-oss tokenizer.json loaded in %.3f s\n", load_s_);
}

TEST_F(GptOssTokenizer, EncodeMatchesTiktoken) {
  const auto& cases = (*data_)["cases"];
  ASSERT_GE(cases.size(), 1500u);
  size_t failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> got = tok_->encode(text);
    EXPECT_EQ(got, ids_of(c["ids"])) << "text " << shown(text);
    if (got != ids_of(c["ids"]) && ++failures > 20) FAIL() << "too many failures";
  }
}

TEST_F(GptOssTokenizer, EncodeWithSpecialsOffMatchesEncodeOrdinary) {
  size_t differing = 0;
  for (const auto& c : (*data_)["cases"]) {
    const std::string text = c["text"];
    const auto expect = ids_of(c.contains("ids_no_special") ? c["ids_no_special"] : c["ids"]);
    differing += c.contains("ids_no_special");
    EXPECT_EQ(tok_->encode(text, /*allow_special=*/false), expect) << "text " << shown(text);
  }
  EXPECT_GT(differing, 50u);  // the corpus really holds special tokens
}

TEST_F(GptOssTokenizer, DecodeRoundTripsAndStreams) {
  // Lossless: no added token strips whitespace. The stream decoder, one id
  // at a time, must give the same text with every piece valid UTF-8 (CJK
  // and emoji are split across tokens in this corpus).
  size_t held_back = 0;
  for (const auto& c : (*data_)["cases"]) {
    const std::string text = c["text"];
    const auto ids = ids_of(c["ids"]);
    EXPECT_EQ(tok_->decode(ids), text) << "text " << shown(text);
    StreamDecoder sd(*tok_);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      held_back += sd.pending_bytes() > 0;
      streamed += piece;
    }
    streamed += sd.finish();
    EXPECT_EQ(streamed, text) << "text " << shown(text);
  }
  EXPECT_GT(held_back, 100u);  // multi-byte characters really were split
}

TEST_F(GptOssTokenizer, DecodeOfRandomIdsMatchesTiktokenReplace) {
  size_t with_replacement = 0;
  for (const auto& d : (*data_)["decodes"]) {
    const auto ids = ids_of(d["ids"]);
    const std::string text = d["text"];
    with_replacement += text.find("\xEF\xBF\xBD") != std::string::npos;
    EXPECT_EQ(tok_->decode(ids), text);
    StreamDecoder sd(*tok_);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.finish();
    EXPECT_EQ(streamed, text);
  }
  // o200k's tokens are mostly whole characters: 16 of the 400 random
  // sequences hold ill-formed UTF-8; the bound only checks some do.
  EXPECT_GT(with_replacement, 8u);
}

}  // namespace
}  // namespace nibble
