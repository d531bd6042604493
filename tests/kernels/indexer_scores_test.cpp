// The Lightning indexer's score kernels (kernels_x86.h: IndexerScores;
// kernels/cpu/mla_avx512.cpp, mla_avx2.cpp) against the formula in f64,
// score[s] = sum_h max(q_h . key_s, 0) w_h, on awkward shapes (1, 3, 9 and
// 64 heads; dim 5, 20, 24 and 128; odd entry counts), under the worst-case
// f32 bound; and a score's bits do not depend on the range it is computed
// in (the decode path splits a query's entries over the threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels_x86.h"

namespace nibble {
namespace {

struct Shape {
  int64_t heads, dim, entries;
};

// q, keys ~ N(0, 1); w ~ N(0, 1) (the model's weights are signed).
struct Data {
  std::vector<float> q, w, keys;
};

Data make(const Shape& sh, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Data d;
  d.q.resize(size_t(sh.heads * sh.dim));
  d.w.resize(size_t(sh.heads));
  d.keys.resize(size_t(sh.entries * sh.dim));
  for (auto* v : {&d.q, &d.w, &d.keys})
    for (float& x : *v) x = nd(rng);
  return d;
}

std::vector<float> run(CpuIsa isa, const Shape& sh, const Data& d, const std::vector<int64_t>& cuts) {
  std::vector<float> score(size_t(sh.entries), -1.0f);
  std::vector<float> buf(size_t((sh.heads + 7) / 8 * 8 * ((sh.dim + 15) / 16 * 16) + 16));
  float* scratch = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float)) % 16) % 16;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const x86::IndexerScores x{sh.heads, sh.dim, d.q.data(), d.w.data(), d.keys.data(), cuts[i], cuts[i + 1],
                               score.data(), scratch};
    if (isa == CpuIsa::avx512) x86::indexer_scores_avx512(x);
    else x86::indexer_scores_avx2(x);
  }
  return score;
}

std::vector<Shape> shapes() {
  return {{1, 5, 1}, {3, 20, 7}, {9, 24, 33}, {64, 128, 301}, {64, 128, 2}};
}

class IndexerScoresIsa : public ::testing::TestWithParam<CpuIsa> {};

// |score - exact| <= sum_h |w_h| ((dim + 2) u A_h + (H + 2) u |relu_h|),
// A_h = sum_c |q_hc key_c|: each dot within (dim + 1) u A_h of exact in any
// order (relu moves no error up), then H products summed in any order.
TEST_P(IndexerScoresIsa, MatchesDoubleReference) {
  const CpuIsa isa = GetParam();
  if (std::string why = cpu_isa_unsupported(isa, host_cpu_features()); !why.empty())
    GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  const double u = std::ldexp(1.0, -24);
  uint32_t seed = 3;
  for (const Shape& sh : shapes()) {
    const Data d = make(sh, seed++);
    const std::vector<float> got = run(isa, sh, d, {0, sh.entries});
    double used = 0;
    for (int64_t s = 0; s < sh.entries; ++s) {
      double exact = 0, bound = 0;
      for (int64_t h = 0; h < sh.heads; ++h) {
        double dot = 0, A = 0;
        for (int64_t c = 0; c < sh.dim; ++c) {
          const double p = double(d.q[size_t(h * sh.dim + c)]) * d.keys[size_t(s * sh.dim + c)];
          dot += p, A += std::fabs(p);
        }
        const double r = std::max(dot, 0.0), w = d.w[size_t(h)];
        exact += r * w;
        bound += std::fabs(w) * (double(sh.dim + 2) * u * A + double(sh.heads + 2) * u * r);
      }
      const double err = std::fabs(got[size_t(s)] - exact);
      ASSERT_LE(err, bound) << cpu_isa_name(isa) << " H " << sh.heads << " dim " << sh.dim << " entry " << s
                            << ": " << got[size_t(s)] << " vs " << exact;
      used = std::max(used, err / bound);
    }
    std::printf("%s H %lld dim %lld entries %lld: max err %.3g of the bound\n", cpu_isa_name(isa),
                (long long)sh.heads, (long long)sh.dim, (long long)sh.entries, used);
  }
}

// Entries in one call, or in ranges that start at odd and even entries,
// give the same bits.
TEST_P(IndexerScoresIsa, ScoresDoNotDependOnTheRange) {
  const CpuIsa isa = GetParam();
  if (std::string why = cpu_isa_unsupported(isa, host_cpu_features()); !why.empty())
    GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  uint32_t seed = 11;
  for (const Shape& sh : shapes()) {
    if (sh.entries < 3) continue;
    const Data d = make(sh, seed++);
    const std::vector<float> whole = run(isa, sh, d, {0, sh.entries});
    const std::vector<float> parts = run(isa, sh, d, {0, 1, sh.entries / 2 + 1, sh.entries});
    for (int64_t s = 0; s < sh.entries; ++s)
      ASSERT_EQ(whole[size_t(s)], parts[size_t(s)]) << cpu_isa_name(isa) << " H " << sh.heads << " entry " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, IndexerScoresIsa, ::testing::Values(CpuIsa::avx2, CpuIsa::avx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) { return std::string(cpu_isa_name(p.param)); });

}  // namespace
}  // namespace nibble
