// `nibble run` and `nibble chat` on a tiny Kimi K2-layout checkpoint with a
// tiktoken-format tokenizer (support/kimi_text_model.h: fixture
// dsv3/kimi_int4's INT4 layers, embedding and head regrown to the Kimi
// tokenizer fixture's 20,256 ids). The oracles are the tokenizer fixtures':
// tiktoken's ids for plain text (kimi_cases.json) and jinja2's rendering of
// Kimi-K2-Instruct's chat template, tokenized by tiktoken
// (kimi_chat_cases.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/kimi_text_model.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble {
namespace {

constexpr int64_t kVocab = test::kKimiVocab;
constexpr int32_t kBos = test::kKimiBos;
constexpr int32_t kImEnd = test::kKimiImEnd;

std::filesystem::path source() { return std::filesystem::path(NIBBLE_SOURCE_DIR); }

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

class KimiText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::write_kimi_text_model(dir_->str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return dir_->str(); }
  static test::TempDir* dir_;
};
test::TempDir* KimiText::dir_ = nullptr;

// Plain text: the prompt's ids are tiktoken's, after the [BOS] that `run`
// puts first (config.json's bos_token_id), and every generated id is one
// of the tokenizer's.
TEST_F(KimiText, RunEncodesLikeTiktoken) {
  const nlohmann::json data = read_json(source() / "tests/fixtures/tokenizer/kimi_cases.json");
  std::string text;
  std::vector<int32_t> want;
  for (const auto& c : data.at("cases")) {
    const std::string t = c.at("text");
    if (t.size() > 20 && t.size() < 120 && t.find('<') == std::string::npos && t.find('[') == std::string::npos &&
        t.find('\0') == std::string::npos && t.find('\n') == std::string::npos) {
      text = t;
      want = c.at("ids").get<std::vector<int32_t>>();
      break;
    }
  }
  ASSERT_FALSE(text.empty());
  want.insert(want.begin(), kBos);
  const test::RunResult r = test::run_nibble({"run", model(), "-p", text, "-n", "10", "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("prompt_tokens").get<std::vector<int32_t>>(), want) << text;
  const std::vector<int32_t> got = j.at("tokens").get<std::vector<int32_t>>();
  ASSERT_FALSE(got.empty());
  for (int32_t id : got) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, kVocab);
  }
}

// `run --chat`: the prompt is Kimi-K2-Instruct's template as jinja2 rendered
// it (default system prompt, user turn, assistant header), the ids
// tiktoken's; the reply stops at <|im_end|> or the token limit.
TEST_F(KimiText, RunChatPromptIsTheTemplates) {
  const nlohmann::json data = read_json(source() / "tests/fixtures/tokenizer/kimi_chat_cases.json");
  const nlohmann::json* user_only = nullptr;
  for (const auto& c : data.at("conversations"))
    if (c.at("name") == "user_only") user_only = &c;
  ASSERT_NE(user_only, nullptr);
  const std::string content = user_only->at("messages").at(0).at("content");
  const test::RunResult r =
      test::run_nibble({"run", model(), "--chat", "-p", content, "-n", "12", "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("prompt_tokens").get<std::vector<int32_t>>(), user_only->at("ids").get<std::vector<int32_t>>());
  const std::vector<int32_t> got = j.at("tokens").get<std::vector<int32_t>>();
  ASSERT_FALSE(got.empty());
  // <|im_end|> ends the reply: it is the last token or absent.
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_NE(got[i], kImEnd) << r.out;
}

// `chat` streams the same greedy reply as `run --chat` for one user turn.
TEST_F(KimiText, ChatAndRunChatReplyAlike) {
  const test::RunResult chat = test::run_nibble({"chat", model(), "--quiet", "-n", "8", "--temp", "0"}, "Hello\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const test::RunResult run = test::run_nibble({"run", model(), "--chat", "-p", "Hello", "-n", "8", "--temp", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string reply = run.out.substr(0, run.out.find_last_not_of('\n') + 1);
  ASSERT_FALSE(reply.empty()) << run.err;
  EXPECT_NE(chat.out.find(reply.substr(0, std::min<size_t>(reply.size(), 8))), std::string::npos)
      << "chat: " << chat.out << "\nrun --chat: " << run.out;
}

}  // namespace
}  // namespace nibble
