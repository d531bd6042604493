// The attention cores with sinks on every ISA path, against a
// double-precision evaluation of the formula written out here:
//   - DeepSeek-V4's attend_cpu (model/deepseek_v4_attention.h), sliding-window
//     layers: each token's heads against its window of shared key = value
//     rows (the ring of earlier steps, then this step's). The compressed
//     entries of CSA / HCA layers reach the same kernels as more row pointers
//     (deepseek_v4_hf_test covers those layers against transformers).
//   - gpt-oss's gqa_attend_cpu (model/gpt_oss_attention.h): grouped-query
//     heads over separate key and value rows, sliding rings and full layers.
// On awkward shapes (1, 3, 6, 9 and 64 heads; 1 to 8 query heads per KV
// head; d 20, 24, 48, 64 and 512; windows of 5, 7 and 128 rows that wrap the
// ring) fed as decode steps and as prefill chunks; plus the batch invariance
// the models rely on (a token alone == in a chunk, 1 thread == 3, bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "kernels/cpu/cpu_isa.h"
#include "model/deepseek_v4_attention.h"
#include "model/deepseek_v4_rope.h"
#include "model/gpt_oss_attention.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

// kv_heads 0: DeepSeek-V4 (one shared row per position, keys = values;
// window > 0); else gpt-oss GQA with that many KV heads (window 0: a full
// layer).
struct Case {
  int64_t heads, kv_heads, dim, window;
  std::vector<int64_t> steps;  // tokens fed per step, from position 0
  int64_t kv_width() const { return (kv_heads > 0 ? kv_heads : 1) * dim; }
};

// Random inputs: q [T, H d], k and v [T, kv_width] ~ N(0, 1) (DeepSeek-V4
// uses k only), sinks ~ N(0, 2^2) (so some heads' sinks outweigh every key
// and some weigh nothing).
struct Inputs {
  std::vector<float> q, k, v, sink;
  int64_t T = 0;
};

Inputs make_inputs(const Case& k, uint32_t seed) {
  Inputs in;
  for (int64_t n : k.steps) in.T += n;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, int64_t n, float sc) {
    v.resize(size_t(n));
    for (float& x : v) x = nd(rng) * sc;
  };
  fill(in.q, in.T * k.heads * k.dim, 1.0f);
  fill(in.k, in.T * k.kv_width(), 1.0f);
  fill(in.v, in.T * k.kv_width(), 1.0f);
  fill(in.sink, k.heads, 2.0f);
  return in;
}

// o [T, H d], every token fed in k.steps.
std::vector<float> run(const Case& k, const Inputs& in, CpuIsa isa, ThreadPool* pool) {
  std::vector<float> o(size_t(in.T * k.heads * k.dim), 0.0f);
  const int64_t qw = k.heads * k.dim, kvw = k.kv_width();
  if (k.kv_heads > 0) {
    const GqaShape s{k.heads, k.kv_heads, k.dim, k.window};
    int64_t longest = 0;
    for (int64_t n : k.steps) longest = std::max(longest, n);
    HostGqaCache cache(s, k.window > 0 ? k.window - 1 + longest : 0);
    int64_t p0 = 0;
    for (int64_t n : k.steps) {
      const GqaSeq seq{&cache, 0, n, p0};
      gqa_attend_cpu(s, in.sink.data(), seq, in.q.data() + p0 * qw, in.k.data() + p0 * kvw, in.v.data() + p0 * kvw,
                     o.data() + p0 * qw, pool, isa);
      p0 += n;
    }
    return o;
  }
  AttentionWeights w;
  w.kind = AttnKind::sliding;
  w.sink = in.sink;
  AttentionShape s;
  s.heads = k.heads, s.head_dim = k.dim, s.window = k.window, s.rollback = 2;
  HostAttentionCache cache(&w, s);
  const RopeTable unused;  // only compressors and indexers use it
  int64_t p0 = 0;
  for (int64_t n : k.steps) {
    const AttnSeq seq{&cache, 0, n, p0};
    attend_cpu(w, s, unused, seq, in.q.data() + p0 * qw, in.k.data() + p0 * kvw, nullptr, nullptr, nullptr,
               o.data() + p0 * qw, pool, nullptr, isa);
    p0 += n;
  }
  return o;
}

// o_h = sum_j softmax_j(q_h . k_j / sqrt(d) | sink_h) v_j in f64 for token t
// (positions max(0, t - W + 1) .. t, or 0 .. t without a window; head h's KV
// head h / (H / kv_heads); v = k for DeepSeek-V4), with the error bound of an f32
// evaluation in any order of summation, per output (u = 2^-24; a sum of k
// products in f32 is within (k - 1) u (1 + O(ku)) of exact, relative to the
// sum of the products' magnitudes; (k + 1) u covers the O(ku) term):
//   s_j  = scale q . k_j            error <= e_s = (d + 3) u max_j scale sum_c |q_c| |k_jc|
//   p_j  = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)): an error e
//          in every s moves each p_j by at most a factor e^(2e), and exp
//          (~2 ulp), the (n + 1)-term sum and the division add (n + 9) u
//   o_c  = sum_j p_j v_jc           error <= (n + 1) u sum_j p_j |v_jc|, relative to the same
// so |o_c - exact| <= P_c ((2n + 10) u + 2 e_s (1 + 2 e_s)), P_c = sum_j p_j |v_jc|.
void reference(const Case& k, const Inputs& in, int64_t t, int64_t h, std::vector<double>& o,
               std::vector<double>& bound) {
  const int64_t d = k.dim, j0 = k.window > 0 ? std::max<int64_t>(0, t - k.window + 1) : 0, n = t - j0 + 1;
  const int64_t kvw = k.kv_width(), g = k.kv_heads > 0 ? h / (k.heads / k.kv_heads) : 0;
  const std::vector<float>& vals = k.kv_heads > 0 ? in.v : in.k;
  const double u = std::ldexp(1.0, -24), scale = 1.0 / std::sqrt(double(float(d)));
  const float* qh = in.q.data() + (t * k.heads + h) * d;
  std::vector<double> sc(static_cast<size_t>(n));
  double mx = in.sink[size_t(h)], Mmax = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = in.k.data() + (j0 + j) * kvw + g * d;
    double dot = 0, M = 0;
    for (int64_t c = 0; c < d; ++c) dot += double(qh[c]) * kj[c], M += std::fabs(double(qh[c]) * kj[c]);
    sc[size_t(j)] = dot * scale;
    Mmax = std::max(Mmax, M * scale);
    mx = std::max(mx, sc[size_t(j)]);
  }
  double sum = std::exp(in.sink[size_t(h)] - mx);
  for (double& x : sc) sum += (x = std::exp(x - mx));
  o.assign(size_t(d), 0.0);
  bound.assign(size_t(d), 0.0);
  const double e_s = double(d + 3) * u * Mmax;
  const double rel = double(2 * n + 10) * u + 2 * e_s * (1 + 2 * e_s);
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = vals.data() + (j0 + j) * kvw + g * d;
    for (int64_t c = 0; c < d; ++c) {
      o[size_t(c)] += sc[size_t(j)] / sum * vj[c];
      bound[size_t(c)] += sc[size_t(j)] / sum * std::fabs(double(vj[c])) * rel;
    }
  }
}

std::vector<Case> cases() {
  return {
      // DeepSeek-V4. 3 heads (a partial group), d 48, window 5: a decode
      // step, a 6-token chunk, then decode steps past the window (the ring
      // wraps).
      {3, 0, 48, 5, {1, 6, 1, 1, 1}},
      // 9 heads (a full group and a 1-head one), d 20 (not a multiple of 8 or
      // 16), window 7: an 11-token prefill, then 2 decode steps.
      {9, 0, 20, 7, {11, 1, 1}},
      // d 24, one head.
      {1, 0, 24, 5, {3, 4}},
      // DeepSeek-V4-Flash shapes (64 heads of 512, window 128): a 130-token
      // prefill (the window fills and slides inside the chunk), then a
      // 3-token chunk and a decode step.
      {64, 0, 512, 128, {130, 3, 1}},
      // gpt-oss. 6 query heads on 2 KV heads (3 per group), d 20, window 5
      // (a ring of 4 + the longest chunk).
      {6, 2, 20, 5, {1, 3, 1, 2, 1, 1}},
      // 9 query heads on 1 KV head (more than one kernel group), d 24, a full layer.
      {9, 1, 24, 0, {4, 1, 7, 1}},
      // gpt-oss-20b shapes: 64 query heads on 8 KV heads of 64, window 128
      // and a full layer, 140 positions.
      {64, 8, 64, 128, {135, 4, 1}},
      {64, 8, 64, 0, {135, 4, 1}},
  };
}

std::string needs(CpuIsa isa) { return cpu_isa_unsupported(isa, host_cpu_features()); }

class AttentionIsa : public ::testing::TestWithParam<CpuIsa> {};

// Every output within the f32 bound of the f64 formula.
TEST_P(AttentionIsa, MatchesDoubleReference) {
  const CpuIsa isa = GetParam();
  if (std::string why = needs(isa); !why.empty()) GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const Case& k : cases()) {
    const Inputs in = make_inputs(k, seed++);
    const std::vector<float> o = run(k, in, isa, &pool);
    double used = 0;
    std::vector<double> ref, bound;
    for (int64_t t = 0; t < in.T; ++t)
      for (int64_t h = 0; h < k.heads; ++h) {
        reference(k, in, t, h, ref, bound);
        for (int64_t c = 0; c < k.dim; ++c) {
          const double got = o[size_t((t * k.heads + h) * k.dim + c)];
          const double err = std::fabs(got - ref[size_t(c)]);
          ASSERT_LE(err, bound[size_t(c)]) << cpu_isa_name(isa) << " H " << k.heads << " d " << k.dim << " token "
                                           << t << " head " << h << " out " << c << ": " << got << " vs "
                                           << ref[size_t(c)];
          used = std::max(used, err / bound[size_t(c)]);
        }
      }
    std::printf("%s H %lld KV %lld d %lld W %lld T %lld: max err %.3g of the bound\n", cpu_isa_name(isa),
                (long long)k.heads, (long long)k.kv_heads, (long long)k.dim, (long long)k.window, (long long)in.T,
                used);
  }
}

// A token's output does not depend on the step it is fed in nor on the
// thread count: token by token on 1 thread and as one chunk on 3 threads
// agree bitwise.
TEST_P(AttentionIsa, BatchAndThreadInvariant) {
  const CpuIsa isa = GetParam();
  if (std::string why = needs(isa); !why.empty()) GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  ThreadPool one(1), three(3);
  uint32_t seed = 7;
  for (Case k : cases()) {
    const Inputs in = make_inputs(k, seed++);
    Case alone = k, chunk = k;
    alone.steps.assign(size_t(in.T), 1);
    chunk.steps = {in.T};
    const std::vector<float> a = run(alone, in, isa, &one), b = run(chunk, in, isa, &three);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(a[i], b[i]) << cpu_isa_name(isa) << " H " << k.heads << " d " << k.dim << " output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionIsa, ::testing::Values(CpuIsa::ref, CpuIsa::avx2, CpuIsa::avx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) { return std::string(cpu_isa_name(p.param)); });

}  // namespace
}  // namespace nibble
