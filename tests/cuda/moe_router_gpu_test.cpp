// The GPU routing kernels against the CPU routing (moe_routing.h, itself
// checked against transformers): scores, top-k with bias, hash routing,
// weights, the grouping by expert and the combine. Skipped, saying why,
// without a CUDA device.
//
// Bounds: expf / log1pf / sqrtf on the GPU and std:: on the host differ by
// a few ulps (CUDA C Programming Guide, "Mathematical Functions": expf
// 2 ulp, log1pf 1 ulp, sqrtf 0 ulp), so a score differs by at most ~8 ulp
// relative (2^-20); the normalised weights then by at most 2^-18 relative
// (a sum of K <= 8 such scores and one division). Selection agrees unless
// two keys are within that distance, which the test checks before it
// accepts a different expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "device/cuda_device.h"
#include "kernels/cuda/moe_router.h"
#include "kernels/moe_routing.h"
#include "kernels/random_weights.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

struct Layer {
  MoeWeights w;
  std::vector<float> bias;
  std::vector<int64_t> table;
};

Layer make_layer(int64_t E, int64_t K, ScoringFunc f, bool bias, bool hash, int64_t vocab, uint64_t seed) {
  Layer l;
  l.w.n_experts = E;
  l.w.top_k = K;
  l.w.scoring = f;
  l.w.norm_topk_prob = f != ScoringFunc::softmax;
  l.w.routed_scaling = f == ScoringFunc::softmax ? 1.0f : 1.5f;
  if (bias) {
    l.bias.resize(static_cast<size_t>(E));
    random_normal(l.bias.data(), E, seed, 0.1f);
    l.w.bias = l.bias.data();
  }
  if (hash) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    l.table.resize(size_t(vocab * K));
    for (int64_t v = 0; v < vocab; ++v) {
      std::vector<int64_t> ids(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) ids[size_t(e)] = e;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int64_t k = 0; k < K; ++k) l.table[size_t(v * K + k)] = ids[size_t(k)];
    }
    l.w.tid2eid = l.table.data();
    l.w.tid2eid_is_i64 = true;
    l.w.tid2eid_rows = vocab;
  }
  return l;
}

void run_case(int64_t E, int64_t K, ScoringFunc f, bool bias, bool hash, int64_t n, uint64_t seed) {
  SCOPED_TRACE("E " + std::to_string(E) + " K " + std::to_string(K) + " scoring " + std::to_string(int(f)) +
               (bias ? " bias" : "") + (hash ? " hash" : "") + " n " + std::to_string(n));
  const int64_t vocab = 50;
  Layer l = make_layer(E, K, f, bias, hash, vocab, seed);
  std::vector<float> logits(size_t(n * E));
  random_normal(logits.data(), int64_t(logits.size()), seed + 1, 2.0f);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) ids[size_t(t)] = int32_t((t * 7 + seed) % vocab);
  MoeRouting want;
  route_tokens(l.w, logits.data(), hash ? ids.data() : nullptr, n, &want);
  const RouteHostResult got = moe_route_run_host(l.w, logits, hash ? ids.data() : nullptr, n);
  ASSERT_EQ(got.experts.size(), size_t(n * K));
  std::vector<float> scores(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    moe_scores(f, logits.data() + t * E, E, scores.data());
    std::vector<float> key(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) key[size_t(e)] = scores[size_t(e)] + (bias ? l.bias[size_t(e)] : 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t ge = got.experts[size_t(t * K + k)];
      // The CPU's order is torch.topk's (unsorted for nth_element); match by expert.
      int64_t kk = -1;
      for (int64_t j = 0; j < K; ++j)
        if (want.experts[size_t(t * K + j)] == ge) kk = j;
      if (kk < 0) {
        ASSERT_FALSE(hash) << "token " << t << ": hash routing must follow the table";
        // Accept only a near tie with an expert the CPU chose and the GPU did not.
        float lo = INFINITY;
        for (int64_t j = 0; j < K; ++j) lo = std::min(lo, key[size_t(want.experts[size_t(t * K + j)])]);
        EXPECT_LE(std::fabs(key[size_t(ge)] - lo), std::ldexp(std::fabs(lo), -18))
            << "token " << t << ": expert " << ge << " is not the CPU's choice and not a tie";
        continue;
      }
      const float gw = got.weights[size_t(t * K + k)], ww = want.weights[size_t(t * K + kk)];
      EXPECT_LE(std::fabs(gw - ww), std::ldexp(std::fabs(ww), -18) + 1e-30f) << "token " << t << " expert " << ge;
      if (hash) {
        EXPECT_EQ(ge, l.table[size_t(int64_t(ids[size_t(t)]) * K + k)]);
      }
    }
    // Descending keys in the GPU's order (top-k routing), up to the near-tie
    // distance (the GPU ranks its own keys, a few ulp from these).
    if (!hash) {
      for (int64_t k = 1; k < K; ++k) {
        const float a = key[size_t(got.experts[size_t(t * K + k - 1)])], b = key[size_t(got.experts[size_t(t * K + k)])];
        EXPECT_GE(a + std::ldexp(std::fabs(a), -18), b) << "token " << t << " rank " << k;
      }
    }
  }
  // Grouping: offsets count each expert's selections; x_rows lists their
  // tokens ascending; slots point back at the selection.
  ASSERT_EQ(got.offsets.size(), size_t(E + 1));
  EXPECT_EQ(got.offsets.front(), 0);
  EXPECT_EQ(got.offsets.back(), n * K);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = std::count(got.experts.begin(), got.experts.end(), int32_t(e));
    EXPECT_EQ(got.offsets[size_t(e + 1)] - got.offsets[size_t(e)], c) << "expert " << e;
    for (int32_t a = got.offsets[size_t(e)] + 1; a < got.offsets[size_t(e + 1)]; ++a)
      EXPECT_LT(got.x_rows[size_t(a - 1)], got.x_rows[size_t(a)]);
  }
  for (int64_t s = 0; s < n * K; ++s) {
    const int32_t a = got.slots[size_t(s)];
    EXPECT_EQ(got.x_rows[size_t(a)], s / K);
    EXPECT_GE(a, got.offsets[size_t(got.experts[size_t(s)])]);
    EXPECT_LT(a, got.offsets[size_t(got.experts[size_t(s)] + 1)]);
  }
}

TEST(MoeRouterGpu, MatchesTheCpuRouting) {
  REQUIRE_CUDA_DEVICE();
  // DeepSeek-V4-Flash: 256 experts, top-6, sqrtsoftplus with bias; hash
  // layers; softmax and sigmoid for the other routers nibble reads; odd E.
  for (int64_t n : {1, 2, 7, 64}) run_case(256, 6, ScoringFunc::sqrtsoftplus, true, false, n, uint64_t(n));
  run_case(256, 6, ScoringFunc::sqrtsoftplus, false, true, 33, 3);
  run_case(64, 8, ScoringFunc::softmax, false, false, 9, 4);
  run_case(300, 4, ScoringFunc::sigmoid, true, false, 5, 5);
  run_case(1, 1, ScoringFunc::sqrtsoftplus, false, false, 3, 6);
  run_case(1024, 8, ScoringFunc::sqrtsoftplus, true, false, 2, 7);
}

TEST(MoeRouterGpu, BadTokenIdIsNamed) {
  REQUIRE_CUDA_DEVICE();
  Layer l = make_layer(16, 2, ScoringFunc::sqrtsoftplus, false, true, 10, 1);
  std::vector<float> logits(3 * 16, 0.5f);
  const int32_t ids[3] = {1, 10, 2};  // 10 is outside the 10-row table
  try {
    moe_route_run_host(l.w, logits, ids, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
  }
}

TEST(MoeRouterGpu, CombineMatchesTheHostSum) {
  REQUIRE_CUDA_DEVICE();
  const int64_t n = 5, K = 3, D = 333;
  std::vector<float> ya(size_t(n * K * D)), wts(size_t(n * K)), sh(size_t(n * D));
  random_normal(ya.data(), int64_t(ya.size()), 1);
  random_normal(wts.data(), int64_t(wts.size()), 2);
  random_normal(sh.data(), int64_t(sh.size()), 3);
  std::vector<int32_t> slots(size_t(n * K));
  for (int64_t s = 0; s < n * K; ++s) slots[size_t(s)] = int32_t((s * 7) % (n * K));  // a permutation
  for (bool with_shared : {false, true}) {
    const std::vector<float> y = moe_combine_run_host(ya, slots, wts, with_shared ? sh : std::vector<float>{}, n, K, D);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t d = 0; d < D; ++d) {
        // Same order as the kernel (k ascending, then the shared expert).
        // The GPU may contract each multiply-add into one fma, the host
        // rounds the product and the sum: each side has at most 2K + 1
        // roundings of at most 2^-24 of the magnitude, so they differ by at
        // most (2K + 1) * 2^-23 of it.
        float want = 0.0f, mag = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const float term = wts[size_t(t * K + k)] * ya[size_t(slots[size_t(t * K + k)]) * size_t(D) + size_t(d)];
          want += term;
          mag += std::fabs(term);
        }
        if (with_shared) {
          want += sh[size_t(t * D + d)];
          mag += std::fabs(sh[size_t(t * D + d)]);
        }
        EXPECT_LE(std::fabs(y[size_t(t * D + d)] - want), double(2 * K + 1) * std::ldexp(mag, -23)) << t << " " << d;
      }
  }
}

}  // namespace
}  // namespace nibble
