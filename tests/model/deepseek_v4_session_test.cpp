// Incremental decode: a prompt fed at once, fed one token at a time, or fed
// in uneven chunks must give the same logits at every position — across the
// sliding-window boundary and the CSA (4) / HCA (128) window boundaries
// (positions 3, 4, 5, 127, 128, 129, 255, 256, ...). Each run is also checked
// against the Hugging Face logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fixture_util.h"
#include "runtime/session.h"

namespace nibble {
namespace {

// Incremental and full forward run the same kernels with the same per-token
// arithmetic in the same order (every row of a chunk is computed as it would
// be alone), so their logits must be bit-identical; the oracle bound is
// deepseek_v4_hf_test.cpp's (f32 rounding, 1e-5 of the largest |logit|).
constexpr double kHfTol = 1e-5;

// Bitwise equality of n rows of logits, reporting the first differing row.
void expect_bitwise_equal(const float* got, const float* want, int64_t n, int64_t vocab, const char* what) {
  for (int64_t t = 0; t < n; ++t)
    if (std::memcmp(got + t * vocab, want + t * vocab, size_t(vocab) * sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": logits differ from the full forward at position " << t;
      return;
    }
}

struct Case {
  std::string fixture;
  int64_t max_tokens;              // of the fixture's longest sequence
  std::vector<int64_t> chunks;     // prefill chunk sizes; the rest one token at a time
};

class DeepseekV4Session : public ::testing::TestWithParam<Case> {};

TEST_P(DeepseekV4Session, ChunkedAndTokenByTokenEqualFullForward) {
  const Case& c = GetParam();
  auto model = load_model(test::fixture_dir(c.fixture), test::test_load_options());
  test::Expected exp = test::load_expected(c.fixture);
  const auto& seq = *std::max_element(exp.sequences.begin(), exp.sequences.end(),
                                      [](const auto& a, const auto& b) { return a.tokens.size() < b.tokens.size(); });
  const int64_t n = std::min<int64_t>(c.max_tokens, int64_t(seq.tokens.size()));
  const int64_t V = exp.vocab;
  std::span<const int32_t> tokens(seq.tokens.data(), size_t(n));

  Session full(*model);
  std::vector<float> ref = full.prefill(tokens, /*all_logits=*/true);
  ASSERT_EQ(full.position(), n);

  Session s(*model);
  std::vector<float> got(size_t(n * V));
  int64_t pos = 0;
  for (int64_t chunk : c.chunks) {
    chunk = std::min(chunk, n - pos);
    if (chunk <= 0) break;
    std::vector<float> l = s.prefill(tokens.subspan(size_t(pos), size_t(chunk)), /*all_logits=*/true);
    std::copy(l.begin(), l.end(), got.begin() + pos * V);
    pos += chunk;
  }
  while (pos < n) {
    std::vector<float> l = s.decode(tokens[size_t(pos)]);
    std::copy(l.begin(), l.end(), got.begin() + pos * V);
    ++pos;
  }
  EXPECT_EQ(s.position(), n);

  test::Comparison self = test::compare_logits(got.data(), ref.data(), n, V, kHfTol);
  test::Comparison hf = test::compare_logits(got.data(), seq.logits.data(), n, V, kHfTol);
  std::printf("[ %s ] %lld tokens: incremental vs full %.3g (pos %lld), vs HF %.3g (pos %lld)\n", c.fixture.c_str(),
              (long long)n, self.max_err, (long long)self.worst_position, hf.max_err, (long long)hf.worst_position);
  expect_bitwise_equal(got.data(), ref.data(), n, V, "incremental");
  EXPECT_LE(hf.max_err, kHfTol) << "worst position " << hf.worst_position;
  EXPECT_EQ(hf.argmax_mismatches, 0);

  // reset() starts the sequence over.
  s.reset();
  EXPECT_EQ(s.position(), 0);
  std::vector<float> again = s.prefill(tokens.subspan(0, 3), true);
  expect_bitwise_equal(again.data(), ref.data(), 3, V, "after reset");
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DeepseekV4Session,
    ::testing::Values(
        // Token by token from position 3: every window boundary up to 300 (HCA 128, 256; CSA every 4; window 12).
        Case{"flash_tiny_stock", 300, {3}},
        // Uneven chunks that start and end mid-window, then single tokens.
        Case{"flash_tiny_stock", 270, {5, 1, 122, 2, 7, 120}},
        Case{"flash_tiny_nvfp4", 270, {1, 2, 3}},
        Case{"hf_tiny_fp8experts", 300, {126, 3, 1, 1, 5}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.fixture + "_" + std::to_string(info.index);
    });

}  // namespace
}  // namespace nibble
