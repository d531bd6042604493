// Repetition, presence and frequency penalties against the published
// definitions (tools/gen_penalty_fixtures.py: transformers'
// RepetitionPenaltyLogitsProcessor, and OpenAI's presence/frequency
// penalties as vLLM applies them, computed in float64 with numpy).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "util/error.h"

namespace nibble {
namespace {

nlohmann::json load_cases() {
  std::ifstream in(NIBBLE_SOURCE_DIR "/tests/fixtures/sampler/penalty_cases.json");
  return nlohmann::json::parse(in);
}

SamplerConfig config_of(const nlohmann::json& c) {
  SamplerConfig s;
  s.temperature = c["temperature"].get<float>();
  s.repetition_penalty = c["repetition_penalty"].get<float>();
  s.presence_penalty = c["presence_penalty"].get<float>();
  s.frequency_penalty = c["frequency_penalty"].get<float>();
  s.context = c["context"].get<std::vector<int32_t>>();
  return s;
}

TEST(SamplerPenalties, DistributionMatchesTheReferenceDefinitions) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::vector<float> logits = c["logits"].get<std::vector<float>>();
    const std::vector<double> want = c["probs"].get<std::vector<double>>();
    Sampler s(config_of(c));
    for (int32_t id : c["generated"].get<std::vector<int32_t>>()) s.record(id);
    std::vector<double> got(logits.size(), 0.0);
    for (const auto& [id, p] : s.distribution(logits.data(), int64_t(logits.size()))) got[size_t(id)] = p;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6) << "token " << i << " of case " << c.dump().substr(0, 120);
  }
}

// Greedy decoding takes the argmax of the penalised logits, and every token
// sample() returns counts towards the next call's penalties.
TEST(SamplerPenalties, GreedyUsesPenalisedLogitsAndCountsItsOwnTokens) {
  for (const auto& c : load_cases()) {
    const std::vector<float> logits = c["logits"].get<std::vector<float>>();
    const std::vector<double> pen = c["penalized"].get<std::vector<double>>();
    SamplerConfig cfg = config_of(c);
    cfg.temperature = 0;
    Sampler s(cfg);
    for (int32_t id : c["generated"].get<std::vector<int32_t>>()) s.record(id);
    const int32_t want = int32_t(std::max_element(pen.begin(), pen.end()) - pen.begin());
    // Skip near-ties, where float32 and float64 may disagree.
    std::vector<double> sorted = pen;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted.size() > 1 && sorted[0] - sorted[1] < 1e-5) continue;
    EXPECT_EQ(s.sample(logits.data(), int64_t(logits.size())), want);
  }
  // Two draws from the same logits: with a presence penalty larger than the
  // gap, the second pick moves to the runner-up because the first was counted.
  SamplerConfig cfg;
  cfg.temperature = 0;
  cfg.presence_penalty = 2.0f;
  Sampler s(cfg);
  const float logits[3] = {1.0f, 2.5f, 2.0f};
  EXPECT_EQ(s.sample(logits, 3), 1);
  EXPECT_EQ(s.sample(logits, 3), 2);
}

TEST(SamplerPenalties, OffByDefaultAndRangesChecked) {
  SamplerConfig cfg;
  cfg.temperature = 0;
  Sampler s(cfg);
  const float logits[3] = {1.0f, 2.5f, 2.0f};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.sample(logits, 3), 1);
  auto bad = [](auto set) {
    SamplerConfig c;
    set(c);
    try {
      Sampler s(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(bad([](SamplerConfig& c) { c.repetition_penalty = 0; }).find("--repeat-penalty"), std::string::npos);
  EXPECT_NE(bad([](SamplerConfig& c) { c.presence_penalty = 3; }).find("--presence-penalty"), std::string::npos);
  EXPECT_NE(bad([](SamplerConfig& c) { c.frequency_penalty = -2.5f; }).find("--frequency-penalty"), std::string::npos);
}

}  // namespace
}  // namespace nibble
