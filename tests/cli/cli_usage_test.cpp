// How the command line behaves as a tool: exit statuses (0 done, 1 error, 2
// bad usage), help that wins over other mistakes, failed writes to stdout
// that are reported, --version, `logits --out -`, explain's wording, the
// warning for more threads than the machine has, and `nibble tokenize`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "tokenizer/tokenizer.h"

namespace nibble::testing {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kShipped = source_path("models/dsv4-tiny");
const std::string kStock = source_path("tests/fixtures/checkpoints/dsv4_stock");

TEST(CliUsage, UsageErrorsExitTwoEverywhere) {
  struct Case {
    std::vector<std::string> args;
    std::string named;  // what the message must name
  };
  const std::vector<Case> cases = {
      {{"run", "-p", "x", "--bogus"}, "--bogus"},
      {{"run", "-p"}, "--prompt"},
      {{"run", "-p", "x", "-n", "many"}, "--max-tokens"},
      {{"run"}, "--prompt"},
      {{"run", "a", "b", "-p", "x"}, "MODEL_DIR"},
      {{"chat", "--temp"}, "--temp"},
      {{"inspect"}, "PATH"},
      {{"inspect", "a", "b"}, "PATH"},
      {{"explain", kStock, "--device", "tpu"}, "tpu"},
      {{"explain", kStock, "--linear-backend", "nope"}, "nope"},
      {{"logits", kStock, "--tokens", "1,x", "--out", "/tmp/x"}, "--tokens"},
      {{"logits", kStock}, "--tokens"},
      {{"convert", "a"}, "SRC"},
      {{"convert", "a", "b", "--to", "int3"}, "int3"},
      {{"kld", "--tokens", "-5", "--text", "x"}, "--tokens"},
      {{"bench", "nothing"}, "nothing"},
      {{"bench", "linear", "--format", "int3"}, "int3"},
      {{"tokenize", kShipped}, "--prompt"},
      {{"version", "extra"}, "extra"},
  };
  for (const auto& c : cases) {
    RunResult r = run_nibble(c.args);
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    EXPECT_EQ(r.exit_code, 2) << line << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.named)) << line << "\n" << r.err;
    EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
  }
  // A runtime failure is still 1.
  EXPECT_EQ(run_nibble({"inspect", "/nonexistent/nibble"}).exit_code, 1);
}

TEST(CliUsage, HelpWinsOverOtherMistakes) {
  for (const char* cmd : {"run", "chat", "explain", "inspect", "logits", "convert", "kld", "bench", "tokenize"}) {
    RunResult r = run_nibble({cmd, "--help", "--bogus"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    EXPECT_TRUE(contains(r.out, std::string("usage: nibble ") + cmd)) << r.out;
    RunResult before = run_nibble({cmd, "--bogus", "-h"});
    EXPECT_EQ(before.exit_code, 0) << cmd << ": " << before.err;
  }
  // "-h" as a flag's value is that value, not a request for help.
  RunResult r = run_nibble({"tokenize", kShipped, "-p", "-h", "--ids"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "usage:")) << r.out;
}

TEST(CliUsage, VersionFlag) {
  for (const char* flag : {"--version", "-V", "version"}) {
    RunResult r = run_nibble({flag});
    EXPECT_EQ(r.exit_code, 0) << flag;
    EXPECT_EQ(r.out.rfind("nibble 0.", 0), 0u) << r.out;
  }
}

// `> /dev/full`: every write fails with ENOSPC once the buffer is flushed.
TEST(CliUsage, FailedWritesToStdoutAreErrors) {
  TempDir out;
  const std::vector<std::vector<std::string>> commands = {
      {"--help"},
      {"run", "--help"},
      {"version"},
      {"inspect", kStock},
      {"inspect", kStock, "--json"},
      {"explain", kStock, "--bandwidth", "10"},
      {"explain", kStock, "--bandwidth", "10", "--json"},
      {"tokenize", kShipped, "-p", "ROMEO."},
      {"run", "-p", "ROMEO.", "-n", "20", "--threads", "2"},
      {"logits", kShipped, "--tokens", "0,1", "--out", "-", "--threads", "2"},
      {"convert", source_path("tests/fixtures/checkpoints/dsv4_bf16"), out.str("c"), "--to", "mxfp4", "--quiet"},
  };
  for (const auto& args : commands) {
    RunResult r = run_nibble(args, "", "/dev/full");
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_NE(r.exit_code, 0) << line;
    // The reason (ENOSPC) is named when the failing write was the last one;
    // the failure itself always is.
    EXPECT_TRUE(contains(r.err, "stdout failed")) << line << ": " << r.err;
  }
}

TEST(CliUsage, LogitsToStdout) {
  TempDir dir;
  RunResult file = run_nibble({"logits", kShipped, "--tokens", "0,5,9", "--out", dir.str("l.f32"), "-t", "2"});
  ASSERT_EQ(file.exit_code, 0) << file.err;
  RunResult out = run_nibble({"logits", kShipped, "--tokens", "0,5,9", "--out", "-", "-t", "2"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  std::ifstream in(dir.str("l.f32"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(out.out.size(), 3u * 4096u * 4u);
  EXPECT_TRUE(out.out == bytes);  // the same forward, the same bytes
  EXPECT_FALSE(std::filesystem::exists("-"));
}

TEST(CliUsage, ExplainWordsOneThread) {
  RunResult r = run_nibble({"explain", kStock, "--bandwidth", "10", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "1 thread,")) << r.out;
  EXPECT_FALSE(contains(r.out, "1 threads")) << r.out;
}

TEST(CliUsage, MoreThreadsThanTheMachineIsWarned) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  RunResult r = run_nibble({"explain", kStock, "--bandwidth", "10", "--threads", std::to_string(hw + 3)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning")) << r.err;
  EXPECT_TRUE(contains(r.err, "hardware threads")) << r.err;
  RunResult ok = run_nibble({"explain", kStock, "--bandwidth", "10", "--threads", "1"});
  EXPECT_FALSE(contains(ok.err, "warning")) << ok.err;
}

// Ids against the tokenizer library's own encode (itself checked against
// Hugging Face tokenizers in tests/tokenizer).
TEST(CliUsage, TokenizeMatchesTheTokenizer) {
  const Tokenizer tok = Tokenizer::from_file(kShipped + "/tokenizer.json");
  const std::string text = "ROMEO.\nBut soft, what light through yonder window breaks?";
  std::vector<int32_t> want = tok.encode(text);
  RunResult ids = run_nibble({"tokenize", kShipped, "-p", text, "--ids"});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::string expect;
  for (size_t i = 0; i < want.size(); ++i) expect += (i ? "," : "") + std::to_string(want[i]);
  EXPECT_EQ(ids.out, expect + "\n");
  RunResult bos = run_nibble({"tokenize", "-m", kShipped, "-p", text, "--ids", "--bos"});
  EXPECT_EQ(bos.out, "0," + expect + "\n");
  RunResult json = run_nibble({"tokenize", kShipped, "-p", "-", "--json"}, text);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), want);
  std::string joined;
  for (const auto& p : j["pieces"]) joined += p.get<std::string>();
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace nibble::testing
