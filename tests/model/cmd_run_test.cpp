// `nibble run` and `nibble chat` on the fixture that ships a tokenizer: greedy
// output text equals transformers' greedy continuation decoded by the
// `tokenizers` library (tools/gen_dsv4_fixtures.py, manifest "text"), and a
// second chat turn fed incrementally equals the whole conversation fed fresh.
// Stop strings cut that text at their first occurrence; generation_config's
// eos_token_id stops generation at the first such token.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "runtime/generate.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/tokenizer.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

// Runs `nibble ARGS` with `input` on stdin; returns stdout (stderr dropped).
std::string run_nibble(const std::string& args, const std::string& input = "", int* status = nullptr) {
  const fs::path in = fs::temp_directory_path() / ("nibble_stdin_" + std::to_string(::getpid()));
  std::ofstream(in) << input;
  const std::string cmd = std::string(NIBBLE_BINARY) + " " + args + " < " + in.string() + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (status) *status = rc;
  fs::remove(in);
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

nlohmann::json text_cases() {
  std::ifstream mf(test::fixture_dir("flash_tiny_stock") + "/expected/manifest.json");
  return nlohmann::json::parse(mf).at("text");
}

const std::string kFlags = " --temp 0 -n 16 --threads 2 --bandwidth 10 --linear-backend cpu_ref --moe-backend cpu_ref";

TEST(CmdRun, GreedyTextMatchesTransformers) {
  const std::string dir = test::fixture_dir("flash_tiny_stock");
  for (const auto& c : text_cases()) {
    const std::string mode = c.at("mode").get<std::string>();
    const std::string prompt = c.at("prompt").get<std::string>();
    std::string args = "run " + dir + " -p " + quote(prompt) + kFlags + (mode == "chat" ? " --chat" : "");
    int rc = -1;
    const std::string out = run_nibble(args, "", &rc);
    EXPECT_EQ(rc, 0) << args;
    EXPECT_EQ(out, c.at("text").get<std::string>() + "\n") << mode << ": " << prompt;
  }
}

TEST(CmdRun, ErrorsAreReported) {
  int rc = 0;
  run_nibble("run " + test::fixture_dir("flash_tiny_stock") + kFlags, "", &rc);  // no --prompt
  EXPECT_NE(rc, 0);
  run_nibble("run " + test::fixture_dir("hf_tiny_fp8experts") + " -p hi --bandwidth 10", "", &rc);  // no tokenizer.json
  EXPECT_NE(rc, 0);
  run_nibble("run " + test::fixture_dir("flash_tiny_stock") + " -p hi --temp -1 --bandwidth 10", "", &rc);
  EXPECT_NE(rc, 0);
}

TEST(CmdRun, StopStringsCutTheTextAtTheirFirstOccurrence) {
  const std::string dir = test::fixture_dir("flash_tiny_stock");
  int tested = 0;
  for (const auto& c : text_cases()) {
    if (c.at("mode") != "raw") continue;
    const std::string full = c.at("text").get<std::string>();
    if (full.size() < 12) continue;
    // Two stop strings taken from the middle and the end of the expected
    // text; the oracle cuts at whichever occurs first.
    const std::string a = full.substr(full.size() / 2, 3), b = full.substr(full.size() - 4);
    const size_t cut = std::min(full.find(a), full.find(b));
    const std::string args = "run " + dir + " -p " + quote(c.at("prompt").get<std::string>()) + kFlags +
                             " --stop " + quote(b) + " --stop " + quote(a);
    int rc = -1;
    EXPECT_EQ(run_nibble(args, "", &rc), full.substr(0, cut) + "\n") << args;
    EXPECT_EQ(rc, 0);
    ++tested;
  }
  EXPECT_GT(tested, 0);
  int rc = 0;
  run_nibble("run " + dir + " -p hi --stop ''" + kFlags, "", &rc);  // an empty stop string
  EXPECT_NE(rc, 0);
}

TEST(CmdRun, GenerationConfigEosStopsGeneration) {
  const std::string src = test::fixture_dir("flash_tiny_stock");
  const nlohmann::json c = text_cases().at(0);
  // The oracle: the library's greedy generation, without any extra stop token.
  auto model = load_model(src, test::test_load_options());
  Tokenizer tok = Tokenizer::from_file(src + "/tokenizer.json");
  std::vector<int32_t> prompt;
  if (c.at("mode") == "chat") {
    ChatMessage user;
    user.role = ChatRole::User;
    user.content = c.at("prompt").get<std::string>();
    prompt = tok.encode(encode_dsv4_chat(std::span<const ChatMessage>(&user, 1), {}));
  } else {
    prompt.push_back(int32_t(model->bos_token_id()));
    tok.encode(c.at("prompt").get<std::string>(), true, prompt);
  }
  Session s(*model);
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.sampler.temperature = 0;
  const std::vector<int32_t> tokens = generate(s, prompt, opt).tokens;
  ASSERT_GE(tokens.size(), 6u);
  const int32_t stop = tokens[5];
  const auto first = std::find(tokens.begin(), tokens.end(), stop);
  const std::string expected = tok.decode(std::vector<int32_t>(tokens.begin(), first));

  // The same model with generation_config.json naming that token an EOS.
  const fs::path dir = fs::temp_directory_path() / ("nibble_gc_eos_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "generation_config.json") fs::create_symlink(e.path(), dir / e.path().filename());
  std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": [1, " << stop << "], \"do_sample\": false}";
  const std::string args = "run " + dir.string() + " -p " + quote(c.at("prompt").get<std::string>()) + kFlags +
                           (c.at("mode") == "chat" ? " --chat" : "");
  int rc = -1;
  EXPECT_EQ(run_nibble(args, "", &rc), expected + "\n");
  EXPECT_EQ(rc, 0);
  std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": \"x\"}";  // not an id: an error
  run_nibble(args, "", &rc);
  EXPECT_NE(rc, 0);
  fs::remove_all(dir);
}

TEST(CmdChat, FirstTurnMatchesTransformers) {
  for (const auto& c : text_cases()) {
    if (c.at("mode") != "chat") continue;
    const std::string prompt = c.at("prompt").get<std::string>();
    const std::string out =
        run_nibble("chat " + test::fixture_dir("flash_tiny_stock") + kFlags + " --quiet", prompt + "\n");
    EXPECT_EQ(out, c.at("text").get<std::string>() + "\n");
  }
}

TEST(CmdChat, SecondTurnEqualsTheConversationFedFresh) {
  const std::string dir = test::fixture_dir("flash_tiny_stock");
  const std::string u1 = "What is the name of the wind?", u2 = "And the river?";
  const std::string out = run_nibble("chat " + dir + kFlags + " --quiet", u1 + "\n" + u2 + "\n/exit\n");
  const size_t nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  const std::string reply1 = out.substr(0, nl), reply2 = out.substr(nl + 1);

  // The oracle: a fresh session over the full chat-mode prompt.
  auto model = load_model(dir, test::test_load_options());
  Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
  std::vector<ChatMessage> msgs(3);
  msgs[0].role = ChatRole::User;
  msgs[0].content = u1;
  msgs[1].role = ChatRole::Assistant;
  msgs[1].content = reply1;
  msgs[2].role = ChatRole::User;
  msgs[2].content = u2;
  const std::vector<int32_t> ids = tok.encode(encode_dsv4_chat(msgs, {}));
  Session s(*model);
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.sampler.temperature = 0;
  GenerateResult r = generate(s, ids, opt);
  std::vector<int32_t> shown = r.tokens;
  if (r.reason == StopReason::stop_token) shown.pop_back();
  EXPECT_EQ(reply2, tok.decode(shown) + "\n");
}

}  // namespace
}  // namespace nibble
