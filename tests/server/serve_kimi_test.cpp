// `nibble serve` on a tiny Kimi K2-layout model with its tiktoken tokenizer
// (support/kimi_text_model.h): chat requests are prompted in Kimi's format
// (the prompt's length is the jinja2 oracle's, kimi_chat_cases.json), the
// greedy reply equals `nibble run --chat`'s on the same model, streamed
// equals whole, and a forced tool_choice, which Kimi's format cannot
// express, is refused naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "server_process.h"
#include "support/kimi_text_model.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"

namespace nibble::testing {
namespace {

using nlohmann::json;

class ServeKimi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::write_kimi_text_model(dir_->str());
    server_ = new ServerProcess(dir_->str(), {"--parallel", "2"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
    server_ = nullptr;
    dir_ = nullptr;
  }
  static json chat(const json& body, int want = 200) {
    const HttpReply r = http_post(server_->port(), "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, want) << r.body;
    return json::parse(r.body);
  }
  static test::TempDir* dir_;
  static ServerProcess* server_;
};
test::TempDir* ServeKimi::dir_ = nullptr;
ServerProcess* ServeKimi::server_ = nullptr;

const json kHello = json::array({{{"role", "user"}, {"content", "Hello"}}});

TEST_F(ServeKimi, PromptIsKimisAndReplyIsRunChats) {
  std::ifstream in(std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/fixtures/tokenizer/kimi_chat_cases.json");
  const json cases = json::parse(in);
  size_t want_prompt = 0;
  for (const auto& c : cases.at("conversations"))
    if (c.at("name") == "user_only") {
      ASSERT_EQ(c.at("messages"), kHello);
      want_prompt = c.at("ids").size();
    }
  ASSERT_GT(want_prompt, 0u);

  const json r = chat({{"messages", kHello}, {"max_tokens", 10}, {"temperature", 0}});
  EXPECT_EQ(r.at("usage").at("prompt_tokens").get<size_t>(), want_prompt) << r.dump();
  const std::string content = r.at("choices").at(0).at("message").value("content", "");
  const test::RunResult run =
      test::run_nibble({"run", dir_->str(), "--chat", "-p", "Hello", "-n", "10", "--temp", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string want = run.out;
  while (!want.empty() && want.back() == '\n') want.pop_back();  // run ends its output with a newline
  EXPECT_EQ(content, want) << r.dump();

  std::string streamed;
  bool done = false;
  for (const json& ev : stream_events(server_->port(), "/v1/chat/completions",
                                      {{"messages", kHello}, {"max_tokens", 10}, {"temperature", 0}, {"stream", true}},
                                      &done)) {
    const json& d = ev.at("choices").at(0).at("delta");
    if (d.contains("content") && d.at("content").is_string()) streamed += d.at("content").get<std::string>();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(streamed, content);
}

TEST_F(ServeKimi, ForcedToolChoiceIsRefusedByName) {
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  const json r = chat({{"messages", kHello}, {"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 4}}, 400);
  EXPECT_NE(r.dump().find("tool_choice"), std::string::npos) << r.dump();
  EXPECT_NE(r.dump().find("kimi-k2"), std::string::npos) << r.dump();
  // "auto" with tools is served (the tools go into Kimi's tool_declare block:
  // a longer prompt).
  const json plain = chat({{"messages", kHello}, {"max_tokens", 2}, {"temperature", 0}});
  const json with = chat({{"messages", kHello}, {"tools", tools}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_GT(with.at("usage").at("prompt_tokens").get<int64_t>(), plain.at("usage").at("prompt_tokens").get<int64_t>());
}

}  // namespace
}  // namespace nibble::testing
