// `nibble serve --spec-draft-tokens K` end to end on the shipped model (its
// trained MTP layer, models/dsv4-tiny): greedy replies identical to a
// server without speculation, for several prompts generated at once (their
// drafts verified in shared batched steps) and one at a time, across the
// 64-token window and the 4- / 128-token compression boundaries; logprobs
// identical (a verify row's logits are a decode step's, bit for bit);
// seeded sampling reproducible; the spec_decode metrics consistent with
// each other and with the tokens generated; the start-up line.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <regex>

#include "nibble/engine.h"
#include "server_process.h"

namespace nibble::testing {
namespace {

using nlohmann::json;

const std::string kModel = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";

json post(int port, const std::string& path, const json& body) {
  const auto r = http_post(port, path, body.dump());
  EXPECT_EQ(r.status, 200) << body.dump() << " -> " << r.body;
  return json::parse(r.body, nullptr, false);
}

// The value of an unlabelled (or exactly labelled) sample in /metrics.
double metric(int port, const std::string& sample) {
  const std::string text = http_get(port, "/metrics").body;
  const std::string key = "\nnibble:" + sample + " ";
  const size_t p = text.find(key);
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + key.size()));
}

// Prompts of several lengths: one token past BOS, a sentence, and one long
// enough (> 64 tokens) that prompt and reply cross the sliding window and
// the 128-token compression.
std::vector<json> requests() {
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "Now is the winter of our discontent made glorious summer. ";
  std::vector<json> out;
  out.push_back({{"prompt", "The"}, {"max_tokens", 40}, {"temperature", 0}});
  out.push_back({{"prompt", "To be, or not to be, that is the question:"}, {"max_tokens", 90}, {"temperature", 0}});
  out.push_back({{"prompt", long_text}, {"max_tokens", 120}, {"temperature", 0}});
  out.push_back({{"prompt", "KING HENRY:"}, {"max_tokens", 60}, {"temperature", 0}});
  return out;
}

class ServeSpec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto engine = Engine::load(kModel, {.threads = 1});
    if (!engine->draft_unavailable().empty()) {
      no_mtp_ = engine->draft_unavailable();
      return;
    }
    plain_ = new ServerProcess({"--parallel", "8", "--no-spec"});
    spec_ = new ServerProcess({"--parallel", "8", "--spec-draft-tokens", "3"});
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete spec_;
    plain_ = spec_ = nullptr;
  }
  void SetUp() override {
    if (!no_mtp_.empty()) GTEST_FAIL() << "the shipped model has no usable MTP layer: " << no_mtp_;
  }
  static std::string no_mtp_;
  static ServerProcess *plain_, *spec_;
};
std::string ServeSpec::no_mtp_;
ServerProcess* ServeSpec::plain_ = nullptr;
ServerProcess* ServeSpec::spec_ = nullptr;

TEST_F(ServeSpec, StartupLineSaysWhether) {
  EXPECT_NE(spec_->log().find("speculative decoding: on, 3 drafts per step"), std::string::npos) << spec_->log();
  EXPECT_NE(plain_->log().find("speculative decoding: off (--no-spec)"), std::string::npos) << plain_->log();
}

TEST_F(ServeSpec, GreedyIdenticalAloneAndBatched) {
  const auto reqs = requests();
  std::vector<json> want;
  for (const json& r : reqs) want.push_back(post(plain_->port(), "/v1/completions", r));
  const double drafted0 = metric(spec_->port(), "spec_decode_num_draft_tokens_total");
  const double generated0 = metric(spec_->port(), "generation_tokens_total");
  // One at a time, then all at once (drafts of four sequences verified in shared steps).
  for (size_t i = 0; i < reqs.size(); ++i) {
    const json got = post(spec_->port(), "/v1/completions", reqs[i]);
    EXPECT_EQ(got["choices"][0]["text"], want[i]["choices"][0]["text"]) << reqs[i].dump();
    EXPECT_EQ(got["choices"][0]["finish_reason"], want[i]["choices"][0]["finish_reason"]);
    EXPECT_EQ(got["usage"]["completion_tokens"], want[i]["usage"]["completion_tokens"]);
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<json>> got;
    for (const json& r : reqs)
      got.push_back(std::async(std::launch::async, [&, r] { return post(spec_->port(), "/v1/completions", r); }));
    for (size_t i = 0; i < reqs.size(); ++i) {
      const json g = got[i].get();
      EXPECT_EQ(g["choices"][0]["text"], want[i]["choices"][0]["text"]) << "batched, " << reqs[i].dump();
      EXPECT_EQ(g["usage"]["completion_tokens"], want[i]["usage"]["completion_tokens"]);
    }
  }
  // Speculation did run: drafts were proposed for these tokens.
  const double drafted = metric(spec_->port(), "spec_decode_num_draft_tokens_total") - drafted0;
  const double generated = metric(spec_->port(), "generation_tokens_total") - generated0;
  EXPECT_GT(drafted, 0);
  EXPECT_GT(generated, 0);
}

TEST_F(ServeSpec, StreamedChatIdentical) {
  const json req = {{"messages", {{{"role", "user"}, {"content", "Tell me of the king."}}}},
                    {"max_tokens", 80}, {"temperature", 0}, {"stream", true}};
  auto text_of = [&](int port) {
    std::string text;
    for (const auto& e : stream_events(port, "/v1/chat/completions", req))
      if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
        text += e["choices"][0]["delta"]["content"].get<std::string>();
    return text;
  };
  const std::string want = text_of(plain_->port());
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(text_of(spec_->port()), want);
}

TEST_F(ServeSpec, LogprobsIdentical) {
  const json req = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 30},
                    {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}};
  const json a = post(plain_->port(), "/v1/chat/completions", req);
  const json b = post(spec_->port(), "/v1/chat/completions", req);
  ASSERT_EQ(a["choices"][0]["logprobs"]["content"].size(), 30u);
  // Bit-identical logits give the same floats, printed the same.
  EXPECT_EQ(a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]);
}

TEST_F(ServeSpec, SeededSamplingReproducible) {
  const json req = {{"prompt", "To be, or not to be"}, {"max_tokens", 40}, {"temperature", 0.8}, {"seed", 1234}};
  const json a = post(spec_->port(), "/v1/completions", req);
  const json b = post(spec_->port(), "/v1/completions", req);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 40);
}

TEST_F(ServeSpec, MetricsConsistent) {
  post(spec_->port(), "/v1/completions", {{"prompt", "The king"}, {"max_tokens", 50}, {"temperature", 0}});
  const int port = spec_->port();
  const double drafts = metric(port, "spec_decode_num_drafts_total");
  const double drafted = metric(port, "spec_decode_num_draft_tokens_total");
  const double accepted = metric(port, "spec_decode_num_accepted_tokens_total");
  double per_pos = 0, prev = 1e300;
  for (int j = 0; j < 3; ++j) {
    const double a = metric(port, "spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(j) + "\"}");
    ASSERT_GE(a, 0) << "position " << j;
    // A draft is checked only after the one before it was accepted.
    EXPECT_LE(a, prev) << "position " << j;
    prev = a;
    per_pos += a;
  }
  EXPECT_EQ(per_pos, accepted);
  EXPECT_GT(drafts, 0);
  EXPECT_LE(drafted, 3 * drafts);
  EXPECT_LE(accepted, drafted);
  // The trained layer agrees with the model on this text some of the time.
  EXPECT_GT(accepted, 0);
  // Not-shown position 3 (k = 3 has positions 0..2).
  EXPECT_LT(metric(port, "spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"}"), 0);
}

TEST(ServeSpecFlags, OutOfRangeIsAUsageError) {
  const std::string cmd = std::string(NIBBLE_BINARY) + " serve " + kModel + " --port 0 --spec-draft-tokens 16 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("--spec-draft-tokens"), std::string::npos) << out;
}

}  // namespace
}  // namespace nibble::testing
