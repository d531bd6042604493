// `nibble run` and `nibble chat` on a gpt-oss-shaped checkpoint with the
// real o200k tokenizer.json (unpacked by CMake into <build>/gptoss-tokenizer):
// fixture tiny_a's layers with a head and an embedding of gpt-oss's full
// 201,088 rows, written at test time (77 MB; too big to commit).
//
// The head's 1,069 rows past the tokenizer's last id (200,018: gpt-oss's
// reserved ids, which the published tokenizer.json does not name) get 50x
// the others' scale, so greedy decoding would always pick one of them if
// sampling did not stop at the tokenizer's range (SamplerConfig::vocab_limit).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/regrown_vocab.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble {
namespace {

constexpr int64_t kVocab = 201088;     // gpt-oss's head rows
constexpr int64_t kTokenizerIds = 200019;  // published tokenizer.json: ids 0 .. 200018

std::string tiny_dir() { return (std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/fixtures/gptoss/tiny_a").string(); }
std::string tokenizer_dir() {
  return (std::filesystem::path(NIBBLE_BINARY).parent_path() / "gptoss-tokenizer").string();
}

// The checkpoint: tiny_a's tensors, embed_tokens / lm_head regrown to kVocab
// rows of seeded random BF16, config.json's vocabulary and markers those of
// gpt-oss, the tokenizer files beside them.
void write_full_vocab_model(const std::string& dir) {
  test::RegrownVocab r;
  r.fixture = tiny_dir();
  r.tokenizer = tokenizer_dir();
  r.tokenizer_files = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
  r.vocab = kVocab;
  r.seed = 7;
  r.row_scale = [](const std::string& name, int64_t row) {
    return name == "lm_head.weight" && row >= kTokenizerIds ? 1.0f : 0.02f;
  };
  r.config = {{"eos_token_id", 200002} /* <|return|> */, {"pad_token_id", 199999}};
  test::write_regrown_vocab_model(r, dir);
}

class GptOssText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_full_vocab_model(dir_->str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return dir_->str(); }
  static test::TempDir* dir_;
};
test::TempDir* GptOssText::dir_ = nullptr;

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// The prompt's ids are tiktoken's (the tokenizer fixture's oracle) and every
// generated id is one the tokenizer names (without the limit, greedy picks
// reserved ids: the --tokens run shows it).
TEST_F(GptOssText, RunEncodesLikeTiktokenAndSamplesOnlyNamedIds) {
  std::ifstream in(std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/fixtures/tokenizer/gptoss_cases.json");
  const nlohmann::json data = nlohmann::json::parse(in);
  std::string text;
  std::vector<int32_t> want_prompt;
  for (const auto& c : data.at("cases")) {
    const std::string t = c.at("text");
    if (t.size() > 20 && t.size() < 120 && t.find('<') == std::string::npos && t.find('\0') == std::string::npos &&
        t.find('\n') == std::string::npos) {
      text = t;
      want_prompt = c.at("ids").get<std::vector<int32_t>>();
      break;
    }
  }
  ASSERT_FALSE(text.empty());
  const test::RunResult r = test::run_nibble({"run", model(), "-p", text, "-n", "12", "--temp", "0", "--json", "--no-bos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("prompt_tokens").get<std::vector<int32_t>>(), want_prompt) << text;
  const std::vector<int32_t> got = j.at("tokens").get<std::vector<int32_t>>();
  ASSERT_FALSE(got.empty());
  for (int32_t id : got) EXPECT_LT(id, kTokenizerIds) << "sampled a reserved id: " << r.out;

  // Without a tokenizer (`--tokens`: ids in, ids out) every head row may be
  // drawn, and this head's reserved rows win: the limit above is what kept
  // them out of the text run.
  const test::RunResult ids = test::run_nibble(
      {"run", model(), "--tokens", join(want_prompt), "-n", std::to_string(got.size()), "--temp", "0"});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_GE(std::stoi(ids.out), kTokenizerIds) << ids.out;
}

// `chat` and `run --chat` encode the turn in harmony and stream a reply
// (a random model's: whatever text), without an error, on the real tokenizer.
TEST_F(GptOssText, ChatAndRunChatReply) {
  const test::RunResult chat = test::run_nibble({"chat", model(), "--quiet", "-n", "8", "--temp", "0"}, "Hello there\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const test::RunResult run = test::run_nibble({"run", model(), "--chat", "-p", "Hello there", "-n", "8", "--temp", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // One conversation turn, the same greedy reply both ways.
  EXPECT_NE(chat.out.find(run.out.substr(0, std::min<size_t>(run.out.size(), 8))), std::string::npos)
      << "chat: " << chat.out << "\nrun --chat: " << run.out;
}

}  // namespace
}  // namespace nibble
