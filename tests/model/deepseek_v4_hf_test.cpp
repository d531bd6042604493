// DeepSeek-V4 forward vs Hugging Face transformers: every fixture's logits
// (full forward from position 0) must match the oracle within 1e-5 of the
// position's largest |logit|, with the same argmax wherever the oracle's
// top-2 gap exceeds that tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixture_util.h"
#include "kernels/cpu/linear_cpu.h"

namespace nibble {
namespace {

// f32 rounding between nibble and the oracle (both f32, different summation
// orders): each product or sum rounds by at most u = 2^-24 = 6e-8 relative,
// and a logit ends a chain of ~10 dot products (per layer: q/kv/o
// projections, attention, experts, hc mixing; then the head) of length
// K <= 1,024 in the fixtures. Rounding errors of a length-K sum add like a
// random walk, ~sqrt(K) * u = 1.9e-6 relative per dot product (observed
// worst: 1.9e-6 of the position's largest |logit|); 1e-5 allows ~5 such
// errors to line up. A real mistake (a scale off by one binade, a wrong rope
// position, a dropped expert) moves logits by >= 1e-3 relative.
constexpr double kRelTol = 1e-5;

// The opt-in int16 kernels (cpu_avx2_int16) round x to int16 per block of
// 32 before every FP4 matrix: element error <= amax / 32767 / 2, uniform, so
// a dot product's relative error is about (amax / rms) / (32767 sqrt(12)),
// at most sqrt(32) / 113,500 = 5e-5 for a block of 32 (one element carrying
// it all). Along a chain of up to ~10 such products (the routed and shared
// FP4 experts of every layer) the errors add up to 1.6e-4 as a random walk
// and 5e-4 all lined up; 5e-4 stays below what a real mistake moves
// (>= 1e-3). Observed: 1.4e-4 on flash_tiny_stock, 8.7e-5 on NVFP4; the
// FP8-expert fixture runs exactly (1.5e-6). So the int16 path does not meet
// issue 19's 1e-5 policy for a default kernel: it stays opt-in.
constexpr double kInt16RelTol = 5e-4;

class DeepseekV4Hf : public ::testing::TestWithParam<std::string> {};

// The fixture's every sequence, fed from position 0 with `backend`, against
// the oracle's logits.
void expect_matches_transformers(const std::string& name, const std::string& backend, double tol = kRelTol) {
  auto model = load_model(test::fixture_dir(name), test::test_load_options(backend));
  test::Expected exp = test::load_expected(name);
  ASSERT_EQ(model->vocab_size(), exp.vocab);
  for (size_t i = 0; i < exp.sequences.size(); ++i)
    test::expect_sequence_matches(*model, exp.sequences[i].tokens, exp.sequences[i].logits.data(), exp.vocab, tol,
                                  name + " " + backend, i);
}

TEST_P(DeepseekV4Hf, FullForwardMatchesTransformers) { expect_matches_transformers(GetParam(), "cpu_ref"); }

// The opt-in AMX backend (cpu_avx512_amx: MXFP4 / NVFP4 / BF16 / FP8-UE8M0
// matrices on tiles from 16 tokens per call, activations split exactly into
// 3 BF16 parts) owes the exact kernels' tolerance: a whole-prompt forward
// puts the attention projections, the head, the shared expert and the
// busier routed experts on the tile path.
TEST_P(DeepseekV4Hf, AmxBackendMatchesTransformers) {
  if (std::string why = amx_unsupported_here(); !why.empty()) GTEST_SKIP() << "cpu_avx512_amx: " << why;
  expect_matches_transformers(GetParam(), "cpu_avx512_amx");
}

// The opt-in int16 backend (cpu_avx2_int16: FP4 matrices against x rounded
// to int16 per block of 32), within its own rounding's budget (kInt16RelTol).
TEST_P(DeepseekV4Hf, Int16BackendMatchesTransformers) {
  if (std::string why = cpu_isa_unsupported(CpuIsa::avx2, host_cpu_features()); !why.empty())
    GTEST_SKIP() << "cpu_avx2_int16: " << why;
  expect_matches_transformers(GetParam(), "cpu_avx2_int16", kInt16RelTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV4Hf, ::testing::ValuesIn(test::dsv4_fixtures()));

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

// A prompt longer than max_chunk_tokens is fed in chunks inside forward():
// the logits of every position are still HF's.
TEST(DeepseekV4HfChunked, LongPromptInSmallChunks) {
  LoadOptions opt = test::test_load_options();
  opt.max_chunk_tokens = 37;
  auto model = load_model(test::fixture_dir("flash_tiny_stock"), opt);
  test::Expected exp = test::load_expected("flash_tiny_stock");
  const auto& seq = exp.sequences[1];  // 133 tokens: crosses 128
  const int64_t n = int64_t(seq.tokens.size());
  std::vector<float> logits(size_t(n * exp.vocab));
  auto st = model->new_state();
  model->forward(*st, seq.tokens, logits.data(), true);
  test::Comparison c = test::compare_logits(logits.data(), seq.logits.data(), n, exp.vocab, kRelTol);
  EXPECT_LE(c.max_err, kRelTol);
  EXPECT_EQ(c.argmax_mismatches, 0);
  // Last-token-only logits equal the last row.
  std::vector<float> last(size_t(exp.vocab));
  auto st2 = model->new_state();
  model->forward(*st2, seq.tokens, last.data(), false);
  for (int64_t v = 0; v < exp.vocab; ++v) ASSERT_EQ(last[size_t(v)], logits[size_t((n - 1) * exp.vocab + v)]);
}

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

// With the kernels the planner picks for this machine (the SIMD kernels
// where the CPU has them), the model must meet the accuracy criterion of
// issue 4 on every fixture: the same argmax as the oracle at >= 99% of the
// positions whose oracle top-2 gap exceeds kRelTol * max|logit| (where the
// argmax is decided at all; test::compare_logits). The default kernels round
// nothing but f32 sums (FP4 experts run against f32 activations), so they
// also stay within the reference kernels' tolerance at every position. (The
// opt-in int8 FP4 kernels do not: on these tiny random models router margins
// are ~1e-4 relative, int8 rounding flips expert choices, and agreement falls
// to 89-96% on the long sequences.)
TEST(DeepseekV4HfPlanner, AutoKernelsTrackTheOracle) {
  for (const std::string name : {"flash_tiny_stock", "flash_tiny_nvfp4", "hf_tiny_fp8experts"}) {
    auto model = load_model(test::fixture_dir(name), test::test_load_options("auto"));
    test::Expected exp = test::load_expected(name);
    int64_t decided = 0, agree = 0;
    for (const auto& seq : exp.sequences) {
      const int64_t n = int64_t(seq.tokens.size());
      std::vector<float> logits(size_t(n * exp.vocab));
      auto st = model->new_state();
      model->forward(*st, seq.tokens, logits.data(), true);
      std::vector<double> errs;
      int64_t seq_decided = 0, seq_agree = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float* ref = seq.logits.data() + t * exp.vocab;
        test::Comparison c = test::compare_logits(logits.data() + t * exp.vocab, ref, 1, exp.vocab, kRelTol);
        errs.push_back(c.max_err);
        // Decided: the oracle's top-2 gap exceeds the tolerance (compare_logits
        // counts a mismatch only there).
        double scale = 0;
        float top1 = -1e30f, top2 = -1e30f;
        for (int64_t v = 0; v < exp.vocab; ++v) {
          scale = std::max(scale, double(std::fabs(ref[v])));
          if (ref[v] > top1) {
            top2 = top1;
            top1 = ref[v];
          } else if (ref[v] > top2) {
            top2 = ref[v];
          }
        }
        if (double(top1 - top2) > kRelTol * scale) {
          ++seq_decided;
          seq_agree += c.argmax_mismatches == 0;
        }
      }
      std::vector<double> sorted = errs;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted[sorted.size() / 2], worst = sorted.back();
      std::printf("[ %s ] planner kernels, %lld tokens: median rel err %.3g, max %.3g, argmax agreement %lld / %lld "
                  "decided positions\n",
                  name.c_str(), (long long)n, median, worst, (long long)seq_agree, (long long)seq_decided);
      EXPECT_LE(worst, kRelTol) << name;
      decided += seq_decided;
      agree += seq_agree;
    }
    ASSERT_GT(decided, 0) << name;
    EXPECT_GE(double(agree) / double(decided), 0.99) << name << ": " << agree << " of " << decided;
  }
}

}  // namespace
}  // namespace nibble
