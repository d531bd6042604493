// `run`, `chat` and the model-loading flags as a user meets them: prompts
// from files and stdin, -n -1 with -c, --seed -1, Ctrl-C, invalid UTF-8 in
// chat, strict generation_config.json / config.json messages, a file given
// as MODEL_DIR. Expected texts come from the program itself run another way
// (a flag against its equivalent), so these check the CLI's plumbing; the
// texts themselves are checked against transformers in tests/model.
#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_util.h"
#include "tokenizer/tokenizer.h"

namespace nibble::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kShipped = source_path("models/dsv4-tiny");
const std::string kRandom = source_path("tests/fixtures/dsv4/flash_tiny_stock");
const std::vector<std::string> kGreedy = {"--temp", "0", "-t", "2"};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A copy of the shipped model whose files are links, with config.json or
// generation_config.json replaced by `edit` applied to the original.
class EditedModel {
 public:
  EditedModel(const std::string& file, const std::function<void(json&)>& edit) {
    for (const auto& e : fs::directory_iterator(kShipped))
      if (e.path().filename() != file) fs::create_symlink(e.path(), dir_.path() / e.path().filename());
    std::ifstream in(kShipped + "/" + file);
    json j = json::parse(in);
    edit(j);
    write_text(dir_.str(file), j.dump());
  }
  std::string str() const { return dir_.str(); }

 private:
  TempDir dir_;
};

TEST(CliText, PromptFromFileOrStdinEqualsTheArgument) {
  const std::string prompt = "ROMEO.\nWhat light";
  RunResult arg = run_nibble(cat({"run", "-p", prompt, "-n", "12"}, kGreedy));
  ASSERT_EQ(arg.exit_code, 0) << arg.err;
  TempDir dir;
  write_text(dir.str("p.txt"), prompt);
  RunResult file = run_nibble(cat({"run", "-f", dir.str("p.txt"), "-n", "12"}, kGreedy));
  EXPECT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(file.out, arg.out);
  RunResult in = run_nibble(cat({"run", "-p", "-", "-n", "12"}, kGreedy), prompt);
  EXPECT_EQ(in.exit_code, 0) << in.err;
  EXPECT_EQ(in.out, arg.out);
  RunResult m = run_nibble(cat({"run", "-m", kShipped, "-p", prompt, "-n", "12"}, kGreedy));
  EXPECT_EQ(m.out, arg.out);
  EXPECT_TRUE(contains(arg.err, "load ")) << arg.err;  // load time in the summary
  // A text far beyond what one argument may hold (~128 KB) reads from a file
  // (tokenize: the same reader, without a 40k-token prefill).
  std::string big;
  while (big.size() < 300000) big += "ROMEO. ";
  write_text(dir.str("big.txt"), big);
  RunResult large = run_nibble({"tokenize", kShipped, "-f", dir.str("big.txt"), "--ids"});
  EXPECT_EQ(large.exit_code, 0) << large.err;
  EXPECT_GT(large.out.size(), 40000u);
}

TEST(CliText, UnlimitedTokensStopAtTheContextCap) {
  const Tokenizer tok = Tokenizer::from_file(kShipped + "/tokenizer.json");
  const int64_t prompt_tokens = 1 + int64_t(tok.encode("ROMEO.").size());  // BOS + text
  RunResult r = run_nibble(cat({"run", "-p", "ROMEO.", "-n", "-1", "-c", "24", "--temp", "1", "--seed", "3"},
                               {"-t", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Either the cap or an EOS ended it; with the cap, exactly 24 - prompt tokens.
  if (contains(r.err, "stop: context_full")) {
    EXPECT_TRUE(contains(r.err, "generated " + std::to_string(24 - prompt_tokens) + " tokens")) << r.err;
  } else {
    EXPECT_TRUE(contains(r.err, "stop: stop_token")) << r.err;
  }
  RunResult too_long = run_nibble(cat({"run", "-p", "ROMEO. ROMEO. ROMEO.", "-c", "3"}, kGreedy));
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_TRUE(contains(too_long.err, "--ctx-size")) << too_long.err;
}

TEST(CliText, RandomSeedIsPrintedAndRepeats) {
  RunResult r = run_nibble({"run", "-p", "ROMEO.", "-n", "16", "--seed", "-1", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.err.find("[nibble] seed ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string seed = r.err.substr(at + 14, r.err.find(' ', at + 14) - (at + 14));
  RunResult again = run_nibble({"run", "-p", "ROMEO.", "-n", "16", "--seed", seed, "-t", "2"});
  EXPECT_EQ(again.out, r.out) << "seed " << seed;
}

TEST(CliText, StopStringIsPrintedEscaped) {
  RunResult r = run_nibble(cat({"run", "-p", "ROMEO.", "-n", "64", "--stop", "\n"}, kGreedy));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "stop: stop_string \"\\n\"")) << r.err;
}

TEST(CliText, CtrlCInRunStopsAndStillPrintsTheSummary) {
  InterruptRun r = run_nibble_interrupted({"run", kRandom, "-p", "hello", "-n", "1000000", "-t", "2"}, "", "", "");
  ASSERT_TRUE(r.interrupted) << r.result.err;
  EXPECT_EQ(r.result.exit_code, 130) << r.result.err;
  EXPECT_TRUE(contains(r.result.err, "stop: interrupted")) << r.result.err;
  EXPECT_TRUE(contains(r.result.err, "decode steps")) << r.result.err;
}

// A long prompt is fed in pieces, so Ctrl-C also stops the prefill.
TEST(CliText, CtrlCStopsALongPrefill) {
  TempDir dir;
  std::string big;
  while (big.size() < 400000) big += "hello world ";
  write_text(dir.str("p.txt"), big);
  const auto t0 = std::chrono::steady_clock::now();
  InterruptRun r = run_nibble_interrupted({"run", kRandom, "-f", dir.str("p.txt"), "-n", "4", "-t", "2"}, "", "", "",
                                          120, /*after_s=*/1.5);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.interrupted) << r.result.err;
  EXPECT_EQ(r.result.exit_code, 130) << r.result.err;
  EXPECT_TRUE(contains(r.result.err, "stop: interrupted")) << r.result.err;
  EXPECT_TRUE(contains(r.result.err, "generated 0 tokens")) << r.result.err;
  EXPECT_LT(s, 30) << r.result.err;
}

// The pieces a long prompt is fed in change nothing: the first token's
// log-probabilities equal a full forward's over the same ids.
TEST(CliText, LongPromptInPiecesMatchesOneForward) {
  std::ifstream in(kShipped + "/heldout.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(3000);  // ~900 tokens: three pieces and the rest
  while (!text.empty() && (text.back() & 0xC0) == 0x80) text.pop_back();  // whole characters
  if (!text.empty() && (text.back() & 0x80)) text.pop_back();
  TempDir dir;
  write_text(dir.str("p.txt"), text);
  RunResult r = run_nibble(cat({"run", "-f", dir.str("p.txt"), "-n", "1", "--json", "--n-probs", "4"}, kGreedy));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(prompt.size(), 600u);
  std::string ids;
  for (int32_t t : prompt) ids += std::to_string(t) + ",";
  ids.pop_back();
  RunResult logits = run_nibble({"logits", kShipped, "--tokens", ids, "--out", "-", "-t", "2"});
  ASSERT_EQ(logits.exit_code, 0) << logits.err;
  const size_t vocab = 4096;
  std::vector<float> row(vocab);
  std::memcpy(row.data(), logits.out.data() + (prompt.size() - 1) * vocab * 4, vocab * 4);
  double max = row[0], sum = 0;
  for (float v : row) max = std::max(max, double(v));
  for (float v : row) sum += std::exp(double(v) - max);
  const double log_z = max + std::log(sum);
  for (const auto& alt : j["logprobs"][0]["top"])
    EXPECT_NEAR(alt["logprob"].get<double>(), double(row[alt["id"].get<size_t>()]) - log_z, 1e-4);
}

TEST(CliText, CtrlCInChatStopsTheReplyAndKeepsTheConversation) {
  // The second reply ends at the 200-token cap, so the run ends by itself.
  InterruptRun r = run_nibble_interrupted({"chat", kRandom, "-n", "-1", "-c", "200", "-t", "2"}, "hello\n", "",
                                          "again\n");
  ASSERT_TRUE(r.interrupted) << r.result.err;
  EXPECT_EQ(r.result.exit_code, 0) << r.result.err;
  EXPECT_TRUE(contains(r.result.err, "reply stopped (Ctrl-C)")) << r.result.err;
  // Two replies: the stopped one, then the next turn's, whose conversation
  // holds the first turn, the K tokens generated before Ctrl-C, and more.
  std::vector<long> generated, conversation;
  const std::string& err = r.result.err;
  const std::regex gen_re(R"(generated (\d+) tokens)"), conv_re(R"(\d+ of (\d+) conversation tokens)");
  for (std::sregex_iterator it(err.begin(), err.end(), gen_re), end; it != end; ++it)
    generated.push_back(std::stol((*it)[1]));
  for (std::sregex_iterator it(err.begin(), err.end(), conv_re), end; it != end; ++it)
    conversation.push_back(std::stol((*it)[1]));
  ASSERT_EQ(generated.size(), 2u) << r.result.err;
  ASSERT_EQ(conversation.size(), 2u) << r.result.err;
  EXPECT_GE(conversation[1], conversation[0] + generated[0]) << r.result.err;
  EXPECT_GT(r.result.out.size(), r.out_at_interrupt.size());
}

TEST(CliText, CtrlCAtThePromptQuits) {
  RunResult first = run_nibble(cat({"chat", kShipped, "-n", "4"}, kGreedy), "hello\n");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  InterruptRun r = run_nibble_interrupted(cat({"chat", kShipped, "-n", "4"}, kGreedy), "hello\n", first.out,
                                          "again\n");
  ASSERT_TRUE(r.interrupted) << r.result.err;
  EXPECT_EQ(r.result.exit_code, 0) << r.result.err;
  EXPECT_EQ(r.result.out, first.out);  // "again" was never answered
}

TEST(CliText, ChatRefusesAnInvalidUtf8LineAndGoesOn) {
  RunResult clean = run_nibble(cat({"chat", kShipped, "-n", "8"}, kGreedy), "Good morrow\n");
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  RunResult r = run_nibble(cat({"chat", kShipped, "-n", "8"}, kGreedy), "ab\xff\xfe" "cd\nGood morrow\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "invalid UTF-8 at byte 2 of the line")) << r.err;
  EXPECT_EQ(r.out, clean.out);  // the refused line never joined the conversation
}

TEST(CliText, ChatHelpAndMultiLineInput) {
  RunResult help = run_nibble({"chat", kShipped, "-t", "2"}, "/help\n");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_TRUE(contains(help.err, "/reset")) << help.err;
  // "a\<newline>b" is one message "a\nb": the same reply as run --chat of it.
  RunResult joined = run_nibble(cat({"chat", kShipped, "-n", "8"}, kGreedy), "Good\\\nmorrow\n");
  RunResult once = run_nibble(cat({"run", "--chat", "-p", "Good\nmorrow", "-n", "8"}, kGreedy));
  EXPECT_EQ(joined.out, once.out);
}

TEST(CliText, GenerationConfigErrorsNameTheFileAndField) {
  struct Case {
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["temperature"] = -1; }, "\"temperature\""},
      {[](json& j) { j["top_k"] = 1e30; }, "\"top_k\""},
      {[](json& j) { j["top_k"] = 2.5; }, "\"top_k\""},
      {[](json& j) { j["top_p"] = "high"; }, "\"top_p\""},
      {[](json& j) { j["do_sample"] = "no"; }, "\"do_sample\""},
      {[](json& j) { j["repetition_penalty"] = 0; }, "\"repetition_penalty\""},
      {[](json& j) { j["eos_token_id"] = 999999; }, "\"eos_token_id\""},
  };
  for (const auto& c : cases) {
    EditedModel m("generation_config.json", c.edit);
    RunResult r = run_nibble(cat({"run", m.str(), "-p", "x", "-n", "1"}, {"-t", "2"}));
    EXPECT_EQ(r.exit_code, 1) << c.field << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "generation_config.json")) << r.err;
    EXPECT_TRUE(contains(r.err, c.field)) << r.err;
    EXPECT_FALSE(contains(r.err, "--")) << "blames a flag: " << r.err;
  }
  // A whole-number float is an integer; null is "not set".
  EditedModel ok("generation_config.json", [](json& j) {
    j["top_k"] = 50.0;
    j["top_p"] = nullptr;
  });
  EXPECT_EQ(run_nibble({"run", ok.str(), "-p", "x", "-n", "1", "-t", "2"}).exit_code, 0);
}

TEST(CliText, ConfigErrorsNameTheField) {
  struct Case {
    std::function<void(json&)> edit;
    std::string must, must_not;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["num_experts_per_tok"] = -2; }, "num_experts_per_tok", "missing"},
      {[](json& j) { j["compress_ratios"] = nullptr; }, "\"compress_ratios\" is null", "tensor"},
      {[](json& j) { j["rope_theta"] = 0; }, "\"rope_theta\" must be", "rope_theta rope_theta"},
      {[](json& j) { j["eos_token_id"] = 4096; }, "\"eos_token_id\"", "generation_config"},
      {[](json& j) { j["bos_token_id"] = -1; }, "\"bos_token_id\"", "generation_config"},
      {[](json& j) { j.erase("hidden_size"); }, "\"hidden_size\" is missing", "4096"},
  };
  for (const auto& c : cases) {
    EditedModel m("config.json", c.edit);
    RunResult r = run_nibble({"run", m.str(), "-p", "x", "-n", "1", "-t", "2"});
    EXPECT_EQ(r.exit_code, 1) << c.must << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "config.json")) << r.err;
    EXPECT_TRUE(contains(r.err, c.must)) << r.err;
    EXPECT_FALSE(contains(r.err, c.must_not)) << r.err;
  }
}

TEST(CliText, AFileIsNotAModelDir) {
  const std::string file = kShipped + "/model.safetensors";
  const std::vector<std::vector<std::string>> commands = {
      {"run", file, "-p", "x"},      {"run", "-m", file, "-p", "x"},     {"chat", file},
      {"logits", file, "--tokens", "0", "--out", "-"}, {"kld", file, "--text", kShipped + "/heldout.txt"},
      {"tokenize", file, "-p", "x"},
  };
  for (const auto& args : commands) {
    const std::string cmd = args[0];
    RunResult r = run_nibble(args);
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "is a file")) << cmd << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "config.json:")) << r.err;
  }
  // inspect reads single files; without a config beside it, it does not
  // claim the tensors are unquantized.
  TempDir alone;
  fs::copy_file(source_path("tests/fixtures/dsv4/hf_tiny_fp8experts/model.safetensors"), alone.str("fp8.safetensors"));
  RunResult fp8 = run_nibble({"inspect", alone.str("fp8.safetensors")});
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  EXPECT_FALSE(contains(fp8.out, "unquantized")) << fp8.out.substr(0, 300);
  EXPECT_TRUE(contains(fp8.out, "no config.json")) << fp8.out.substr(0, 300);
  EXPECT_TRUE(contains(fp8.out, "fp8")) << fp8.out.substr(0, 2000);  // the tensors still say what they are
}

// --json's log-probabilities against a full forward over prompt + reply
// (`nibble logits`), log-softmaxed here; its text against the streamed run.
TEST(CliText, RunJsonReportsTokensTextAndLogprobs) {
  RunResult streamed = run_nibble(cat({"run", "-p", "ROMEO.", "-n", "6"}, kGreedy));
  RunResult r = run_nibble(cat({"run", "-p", "ROMEO.", "-n", "6", "--json", "--n-probs", "3"}, kGreedy));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["text"].get<std::string>() + "\n", streamed.out);
  EXPECT_EQ(j["stop_reason"], "max_tokens");
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  const auto tokens = j["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 6u);
  ASSERT_EQ(j["logprobs"].size(), 6u);
  std::string ids;
  for (int32_t t : prompt) ids += std::to_string(t) + ",";
  for (size_t i = 0; i + 1 < tokens.size(); ++i) ids += std::to_string(tokens[i]) + ",";
  ids.pop_back();
  RunResult logits = run_nibble({"logits", kShipped, "--tokens", ids, "--out", "-", "-t", "2"});
  ASSERT_EQ(logits.exit_code, 0) << logits.err;
  const size_t vocab = 4096;
  ASSERT_EQ(logits.out.size(), (prompt.size() + tokens.size() - 1) * vocab * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<float> row(vocab);
    std::memcpy(row.data(), logits.out.data() + (prompt.size() - 1 + i) * vocab * 4, vocab * 4);
    double max = row[0], sum = 0;
    for (float v : row) max = std::max(max, double(v));
    for (float v : row) sum += std::exp(double(v) - max);
    const double log_z = max + std::log(sum);
    const json& t = j["logprobs"][i];
    EXPECT_EQ(t["id"], tokens[i]);
    EXPECT_NEAR(t["logprob"].get<double>(), double(row[size_t(tokens[i])]) - log_z, 1e-4) << i;
    ASSERT_EQ(t["top"].size(), 3u);
    EXPECT_EQ(t["top"][0]["id"], tokens[i]);  // greedy: the chosen one is the most likely
    for (const auto& alt : t["top"])
      EXPECT_NEAR(alt["logprob"].get<double>(), double(row[alt["id"].get<size_t>()]) - log_z, 1e-4);
  }
}

// An installed nibble (PREFIX/bin) runs the model installed beside it
// (PREFIX/share/nibble/models/dsv4-tiny), not the build tree's.
TEST(CliText, DefaultModelIsFoundRelativeToTheBinary) {
  TempDir prefix;
  fs::create_directories(prefix.path() / "bin");
  fs::create_directories(prefix.path() / "share/nibble/models");
  fs::copy_file(NIBBLE_BINARY, prefix.path() / "bin/nibble");
  fs::create_directory_symlink(kRandom, prefix.path() / "share/nibble/models/dsv4-tiny");
  const std::string cmd = (prefix.path() / "bin/nibble").string() + " run -p hello -n 2 --json -t 2 2>/dev/null > " +
                          prefix.str("out.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(prefix.str("out.json"));
  const json j = json::parse(in);
  EXPECT_EQ(j["model"], (prefix.path() / "share/nibble/models/dsv4-tiny").string());
}

// On a terminal: editline reads the line, Ctrl-C (the tty's interrupt
// character, so a real SIGINT to the process group) stops the reply, the up
// arrow recalls the last message, and Ctrl-C at the prompt quits cleanly.
TEST(CliText, TerminalChatHasHistoryAndCtrlC) {
  int fd = -1;
  const pid_t pid = forkpty(&fd, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(NIBBLE_BINARY, "nibble", "chat", kShipped.c_str(), "-n", "300", "-t", "2", (char*)nullptr);
    _exit(127);
  }
  std::string seen;
  auto read_until = [&](const std::string& what, size_t from, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    while (seen.find(what, from) == std::string::npos &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, size_t(n));
    }
    return seen.find(what, from) != std::string::npos;
  };
  auto type = [&](const std::string& keys) { ASSERT_EQ(::write(fd, keys.data(), keys.size()), ssize_t(keys.size())); };
  ASSERT_TRUE(read_until("> ", 0, 30)) << seen;
  type("Good morrow\r");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  type("\x03");
  EXPECT_TRUE(read_until("reply stopped (Ctrl-C)", 0, 30)) << seen;
  const size_t stopped = seen.find("reply stopped");
  ASSERT_TRUE(read_until("> ", stopped, 30)) << seen;
  const size_t mark = seen.find("> ", stopped) + 2;
  type("\x1b[A");  // up arrow: the last message comes back
  EXPECT_TRUE(read_until("Good morrow", mark, 10)) << seen.substr(mark);
  type("\x15");    // Ctrl-U: drop it again
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  type("\x03");    // Ctrl-C at the prompt: quit
  read_until("never printed", mark, 3);
  int status = 0;
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (waitpid(pid, &status, WNOHANG) == 0 && !WIFEXITED(status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "chat did not quit at Ctrl-C: " << seen;
  }
  ::close(fd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << seen;
}

}  // namespace
}  // namespace nibble::testing
