// The sampler against Hugging Face's logits warpers (fixture from
// tools/gen_sampler_fixtures.py), and sample() against its own distribution
// by frequency counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "util/error.h"

namespace nibble {
namespace {

nlohmann::json load_cases() {
  std::ifstream in(NIBBLE_SOURCE_DIR "/tests/fixtures/sampler/cases.json");
  return nlohmann::json::parse(in);
}

SamplerConfig config_of(const nlohmann::json& c, uint64_t seed = 0) {
  SamplerConfig s;
  s.temperature = c["temperature"].get<float>();
  s.top_k = c["top_k"].get<int64_t>();
  s.top_p = c["top_p"].get<float>();
  s.min_p = c["min_p"].get<float>();
  s.seed = seed;
  return s;
}

TEST(Sampler, DistributionMatchesTransformersWarpers) {
  auto cases = load_cases();
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    std::vector<float> logits = c["logits"].get<std::vector<float>>();
    std::vector<double> want = c["probs"].get<std::vector<double>>();
    Sampler s(config_of(c));
    std::vector<double> got(logits.size(), 0.0);
    for (const auto& [id, p] : s.distribution(logits.data(), int64_t(logits.size()))) got[size_t(id)] = p;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6) << "token " << i << " of case " << c.dump().substr(0, 80);
  }
}

TEST(Sampler, SampleFrequenciesFollowTheDistribution) {
  auto cases = load_cases();
  const auto& c = cases[3];  // top-p case
  std::vector<float> logits = c["logits"].get<std::vector<float>>();
  Sampler s(config_of(c, 42));
  auto dist = s.distribution(logits.data(), int64_t(logits.size()));
  const int n = 20000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) counts[s.sample(logits.data(), int64_t(logits.size()))]++;
  // Pearson chi-square against the expected counts; the 0.999 quantile for
  // <= 10 degrees of freedom is below 30.
  double chi2 = 0;
  for (const auto& [id, p] : dist) {
    double expect = p * n;
    double d = counts[id] - expect;
    chi2 += d * d / expect;
    counts.erase(id);
  }
  EXPECT_TRUE(counts.empty()) << "sampled a filtered token";
  EXPECT_LT(chi2, 30.0);
}

TEST(Sampler, SeedMakesItReproducible) {
  std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  SamplerConfig cfg;
  cfg.seed = 7;
  Sampler a(cfg), b(cfg);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.sample(logits.data(), 5), b.sample(logits.data(), 5));
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> logits = {1, 5, 3, 5, 2};
  SamplerConfig cfg;
  cfg.temperature = 0;
  Sampler s(cfg);
  EXPECT_EQ(s.sample(logits.data(), 5), 1);
}

// vocab_limit keeps ids at or above it out of every draw (the head rows a
// tokenizer has no text for): greedy takes the best id below it, and the
// sampled distribution is the softmax over the ids below it alone.
TEST(Sampler, VocabLimitNeverDrawsIdsAtOrAboveIt) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 9.0f, 8.0f};
  SamplerConfig greedy;
  greedy.temperature = 0;
  greedy.vocab_limit = 3;
  EXPECT_EQ(Sampler(greedy).sample(logits.data(), 5), 1);
  SamplerConfig cfg;
  cfg.vocab_limit = 3;
  const auto dist = Sampler(cfg).distribution(logits.data(), 5);
  ASSERT_EQ(dist.size(), 3u);
  const double z = std::exp(0.5) + std::exp(2.0) + std::exp(1.0);
  EXPECT_EQ(dist[0].first, 1);
  EXPECT_NEAR(dist[0].second, std::exp(2.0) / z, 1e-12);
  EXPECT_EQ(dist[2].first, 0);
  EXPECT_NEAR(dist[2].second, std::exp(0.5) / z, 1e-12);
  Sampler s(cfg);
  for (int i = 0; i < 200; ++i) EXPECT_LT(s.sample(logits.data(), 5), 3);
  // A limit past the logits' width changes nothing.
  cfg.vocab_limit = 99;
  EXPECT_EQ(Sampler(cfg).distribution(logits.data(), 5).size(), 5u);
}

// The candidates come out highest logit first, lowest id first on ties
// (-0 ties with +0), as a stable sort by logit would give them: checked on a
// DeepSeek-sized vocabulary full of ties, zeros of both signs and -inf.
TEST(Sampler, CandidateOrderIsAStableSortByLogit) {
  std::vector<float> logits(129280);
  uint32_t x = 12345;
  for (size_t i = 0; i < logits.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    const uint32_t r = x >> 8;
    logits[i] = r % 7 == 0 ? 0.0f : r % 7 == 1 ? -0.0f : r % 7 == 2 ? -INFINITY
              : r % 7 == 3 ? float(int(r % 13) - 6) : float(int(r % 100000) - 50000) * 1e-4f;
  }
  std::vector<int32_t> want(logits.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = int32_t(i);
  std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  SamplerConfig cfg;
  cfg.temperature = 2.0f;
  auto dist = Sampler(cfg).distribution(logits.data(), int64_t(logits.size()));
  ASSERT_EQ(dist.size(), logits.size());
  for (size_t i = 0; i < dist.size(); ++i) ASSERT_EQ(dist[i].first, want[i]) << "rank " << i;
}

TEST(Sampler, BadSettingsNameTheFlag) {
  SamplerConfig cfg;
  cfg.top_p = 0;
  EXPECT_THROW(Sampler{cfg}, Error);
  cfg = {};
  cfg.temperature = -1;
  try {
    Sampler s(cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--temp"), std::string::npos);
  }
}

}  // namespace
}  // namespace nibble
