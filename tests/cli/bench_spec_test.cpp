// `nibble bench decode --spec-draft-tokens K / --no-spec` and what `explain`
// says about speculative decoding: the section appears with verify costs for
// k = 1..K, identical greedy tokens, acceptance per draft position and the
// mean accepted length; a model without an MTP layer, or K out of range, is
// a clean error naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "support/temp_dir.h"

namespace nibble::testing {
namespace {

const std::string kStock = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv4/flash_tiny_stock";
const std::string kNoMtp = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv4/hf_tiny_fp8experts";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(BenchSpec, SectionWithVerifyCostsAndAcceptance) {
  RunResult r = run_nibble({"bench", "decode", kStock, "--sequences", "1", "-n", "2", "--prompt-tokens", "20",
                            "--bandwidth", "10", "-t", "2", "--spec-draft-tokens", "2", "--spec-new-tokens", "12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "verify k=1 (2 tokens)")) << r.out;
  EXPECT_TRUE(has(r.out, "verify k=2 (3 tokens)")) << r.out;
  EXPECT_TRUE(has(r.out, "tokens identical")) << r.out;
  EXPECT_TRUE(has(r.out, "acceptance per draft position:")) << r.out;
  EXPECT_TRUE(has(r.out, "mean accepted length")) << r.out;
  // JSON: one object per row, then the section's.
  RunResult j = run_nibble({"bench", "decode", kStock, "--sequences", "1", "-n", "2", "--prompt-tokens", "20",
                            "--bandwidth", "10", "-t", "2", "--spec-draft-tokens", "1", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const std::string last = j.out.substr(j.out.rfind('{', j.out.rfind("\"speculative\"")));
  nlohmann::json s = nlohmann::json::parse(last).at("speculative");
  EXPECT_EQ(s.at("draft_tokens"), 1);
  EXPECT_EQ(s.at("identical"), true);
  EXPECT_EQ(s.at("verify").size(), 1u);
  EXPECT_GT(s.at("verify")[0].at("cost_ratio").get<double>(), 0.0);
  EXPECT_GE(s.at("mean_accepted_length").get<double>(), 1.0);
  // --no-spec: no section.
  RunResult n = run_nibble({"bench", "decode", kStock, "--sequences", "1", "-n", "1", "--prompt-tokens", "8",
                            "--bandwidth", "10", "-t", "2", "--spec-draft-tokens", "2", "--no-spec"});
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_FALSE(has(n.out, "speculative")) << n.out;
}

TEST(BenchSpec, BadInputIsAClearError) {
  RunResult r = run_nibble({"bench", "decode", kNoMtp, "--sequences", "1", "-n", "1", "--prompt-tokens", "8",
                            "--bandwidth", "10", "-t", "2", "--spec-draft-tokens", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--spec-draft-tokens 2")) << r.err;
  EXPECT_TRUE(has(r.err, "num_nextn_predict_layers is 0")) << r.err;
  RunResult k = run_nibble({"bench", "decode", kStock, "--sequences", "1", "--spec-draft-tokens", "16"});
  EXPECT_NE(k.exit_code, 0);
  EXPECT_TRUE(has(k.err, "--spec-draft-tokens")) << k.err;
  EXPECT_TRUE(has(k.err, "outside [0, 15]")) << k.err;
}

TEST(ExplainSpec, SaysWhetherAndWhy) {
  RunResult r = run_nibble({"explain", kStock, "--bandwidth", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "speculative decoding: off. The checkpoint has an MTP layer")) << r.out;
  RunResult n = run_nibble({"explain", kNoMtp, "--bandwidth", "10"});
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_TRUE(has(n.out, "speculative decoding: off. The checkpoint has no MTP layer")) << n.out;
  RunResult j = run_nibble({"explain", kStock, "--bandwidth", "10", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  nlohmann::json s = nlohmann::json::parse(j.out).at("speculative");
  EXPECT_EQ(s.at("on"), false);
  EXPECT_EQ(s.at("mtp_layer"), true);
}

}  // namespace
}  // namespace nibble::testing

namespace nibble::testing {
namespace {

// `nibble run --spec-draft-tokens K`: the same greedy text as without, the
// acceptance in the summary; a model without an MTP layer is a clear error.
TEST(RunSpec, SameTextAndSummary) {
  const std::string stock = std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv4/flash_tiny_stock";
  const std::vector<std::string> base = {"run", stock, "-p", "The river ran past the", "-n", "20", "--temp", "0",
                                         "-t", "2", "--bandwidth", "10"};
  RunResult plain = run_nibble(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto with = base;
  with.insert(with.end(), {"--spec-draft-tokens", "3"});
  RunResult spec = run_nibble(with);
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("speculative:"), std::string::npos) << spec.err;
  EXPECT_NE(spec.err.find("mean accepted length"), std::string::npos) << spec.err;
  with.push_back("--no-spec");
  RunResult off = run_nibble(with);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("speculative:"), std::string::npos) << off.err;
  // The shipped model with its MTP layer switched off in config.json (the
  // mtp.* tensors stay: a layer the config does not announce is not used).
  nibble::test::TempDir dir;
  const std::string shipped = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
  for (const auto& f : std::filesystem::directory_iterator(shipped))
    if (f.path().filename() != "config.json") std::filesystem::create_symlink(f.path(), dir.path() / f.path().filename());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(shipped + "/config.json"));
  cfg["num_nextn_predict_layers"] = 0;
  cfg["compress_ratios"].erase(cfg["compress_ratios"].size() - 1);
  std::ofstream(dir.str("config.json")) << cfg.dump();
  RunResult none = run_nibble({"run", dir.str(), "-p", "ROMEO.", "-n", "4", "--spec-draft-tokens", "2", "-t", "2",
                               "--bandwidth", "10"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--spec-draft-tokens 2: speculative decoding needs the model's MTP layer"), std::string::npos)
      << none.err;
  RunResult range = run_nibble({"run", stock, "-p", "x", "--spec-draft-tokens", "99"});
  EXPECT_NE(range.exit_code, 0);
  EXPECT_NE(range.err.find("--spec-draft-tokens"), std::string::npos) << range.err;
}

// `nibble chat --spec-draft-tokens K` on the shipped model (its trained MTP
// layer): two turns, greedy, the same replies as without speculation, and
// the acceptance summary on stderr.
TEST(ChatSpec, SameRepliesAcrossTurns) {
  const std::string shipped = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
  const std::string input = "Who is there?\nSpeak again.\n";
  const std::vector<std::string> base = {"chat", shipped, "--quiet", "-n", "40", "--temp", "0", "-t", "2"};
  RunResult plain = run_nibble(base, input);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_FALSE(plain.out.empty());
  // Without --quiet, so that the speed line with the acceptance comes.
  std::vector<std::string> with = {"chat", shipped, "-n", "40", "--temp", "0", "-t", "2", "--spec-draft-tokens", "2"};
  RunResult spec = run_nibble(with, input);
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("mean accepted length"), std::string::npos) << spec.err;
}

}  // namespace
}  // namespace nibble::testing
