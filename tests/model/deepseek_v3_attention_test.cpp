// mla_attend_cpu (model/deepseek_v3_attention.h) on every ISA path against a
// double-precision evaluation of the absorbed formula written out here, on
// awkward shapes (3, 5, 7, 9 and 64 heads; C 20, 24, 48 and 512; r, n, v not
// multiples of the vector width) and cache lengths 1 .. 1001, fed as decode
// steps and as prefill chunks at zero and nonzero positions; plus the batch
// invariance the model relies on (a token alone == in a chunk, 1 thread ==
// 3, bitwise) and the AVX2 and AVX-512 paths against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "kernels/cpu/cpu_isa.h"
#include "model/deepseek_v3_attention.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

struct Case {
  MlaShape s;
  int64_t cached;  // rows written into the cache directly, before the first step
  std::vector<int64_t> steps;  // tokens fed per step after that
};

// Random inputs of one case: kv_b ~ N(0, 1/C) like a trained projection's
// scale, everything else N(0, 1).
struct Inputs {
  std::vector<float> kv_b, q, lat, kr;  // q [T, H (n + r)], lat [T, C], kr [T, r]
  int64_t T = 0;
};

Inputs make_inputs(const Case& k, uint32_t seed) {
  Inputs in;
  const MlaShape& s = k.s;
  in.T = k.cached;
  for (int64_t n : k.steps) in.T += n;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, int64_t n, float sc) {
    v.resize(size_t(n));
    for (float& x : v) x = nd(rng) * sc;
  };
  fill(in.kv_b, s.heads * (s.nope + s.v) * s.latent, 1.0f / std::sqrt(float(s.latent)));
  fill(in.q, in.T * s.heads * s.q_width(), 1.0f);
  fill(in.lat, in.T * s.latent, 1.0f);
  fill(in.kr, in.T * s.rope, 1.0f);
  return in;
}

// o [T, H v] for the tokens fed in steps (rows < cached stay 0).
std::vector<float> run(const Case& k, const Inputs& in, CpuIsa isa, ThreadPool* pool) {
  const MlaShape& s = k.s;
  const int64_t H = s.heads, C = s.latent, R = s.rope, qw = s.q_width();
  HostMlaCache cache(s);
  cache.cache.latent.assign(in.lat.begin(), in.lat.begin() + k.cached * C);
  cache.cache.k_rope.assign(in.kr.begin(), in.kr.begin() + k.cached * R);
  std::vector<float> o(size_t(in.T * H * s.v), 0.0f);
  int64_t p0 = k.cached;
  for (int64_t n : k.steps) {
    const MlaSeq seq{&cache, n, p0};
    mla_attend_cpu(s, in.kv_b.data(), seq, in.q.data() + p0 * H * qw, in.lat.data() + p0 * C,
                   in.kr.data() + p0 * R, o.data() + p0 * H * s.v, pool, isa);
    p0 += n;
  }
  return o;
}

// The absorbed formula in f64 for token t (position t, rows 0..t), with the
// error bound of an f32 evaluation in any order of summation, per output.
//
// Bound (u = 2^-24; a sum of k products evaluated in f32 in any order is
// within (k - 1) u (1 + O(ku)) of exact, relative to the sum of the
// products' magnitudes; the sums below are at most a few thousand terms, so
// (k + 1) u covers the O(ku) term):
//   q_abs_c = sum_i q_i W_UK[i, c]      error <= (n + 1) u A_c,  A_c = sum_i |q_i| |W_UK[i, c]|
//   s_j     = scale (q_abs . c_j + q_r . kr_j)
//           error <= e_s = (n + C + r + 4) u max_j M_j,
//                    M_j = scale (sum_c A_c |c_jc| + sum_i |q_r,i| |kr_ji|)
//   p_j = exp(s_j - m) / sum: an error e in every s moves each p_j by at
//         most a factor e^(2e) (the max cancels), and exp (~2 ulp), the
//         T-term sum and the division add (T + 8) u, relative
//   ctx_c = sum_j p_j c_jc             error <= (T + 1) u sum_j p_j |c_jc|, relative to the same
//   o_i   = sum_c W_UV[i, c] ctx_c      error <= (C + 1) u sum_c |W_UV[i, c]| |ctx_c|
// so |o_i - exact| <= P_i ((T + C + 2) u + (T + 8) u + 2 e_s (1 + 2 e_s)),
// P_i = sum_c |W_UV[i, c]| sum_j p_j |c_jc|. It is linear in the lengths
// (the worst case); random rounding errors are ~sqrt of it, and the tests
// print how much of the bound they use.
void reference(const MlaShape& s, const Inputs& in, int64_t t, int64_t h, std::vector<double>& o,
               std::vector<double>& bound) {
  const int64_t C = s.latent, R = s.rope, N = s.nope, V = s.v, H = s.heads, qw = s.q_width();
  const double u = std::ldexp(1.0, -24);
  const float* qh = in.q.data() + (t * H + h) * qw;
  const float* wk = in.kv_b.data() + h * (N + V) * C;
  const float* wv = wk + N * C;
  std::vector<double> qa(size_t(C), 0.0), A(size_t(C), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      qa[size_t(c)] += double(qh[i]) * wk[i * C + c];
      A[size_t(c)] += std::fabs(double(qh[i]) * wk[i * C + c]);
    }
  std::vector<double> sc(size_t(t + 1));
  double mx = -1e300, Mmax = 0;
  for (int64_t j = 0; j <= t; ++j) {
    double d = 0, M = 0;
    for (int64_t c = 0; c < C; ++c) {
      d += qa[size_t(c)] * in.lat[size_t(j * C + c)];
      M += A[size_t(c)] * std::fabs(in.lat[size_t(j * C + c)]);
    }
    for (int64_t i = 0; i < R; ++i) {
      d += double(qh[N + i]) * in.kr[size_t(j * R + i)];
      M += std::fabs(double(qh[N + i]) * in.kr[size_t(j * R + i)]);
    }
    sc[size_t(j)] = d * s.scale;
    Mmax = std::max(Mmax, M * s.scale);
    mx = std::max(mx, sc[size_t(j)]);
  }
  double sum = 0;
  for (double& x : sc) sum += (x = std::exp(x - mx));
  std::vector<double> ctx(size_t(C), 0.0), ctx_abs(size_t(C), 0.0);
  for (int64_t j = 0; j <= t; ++j)
    for (int64_t c = 0; c < C; ++c) {
      ctx[size_t(c)] += sc[size_t(j)] / sum * in.lat[size_t(j * C + c)];
      ctx_abs[size_t(c)] += sc[size_t(j)] / sum * std::fabs(in.lat[size_t(j * C + c)]);
    }
  const double T = double(t + 1);
  const double e_s = double(N + C + R + 4) * u * Mmax;
  const double rel = (T + double(C) + 2) * u + (T + 8) * u + 2 * e_s * (1 + 2 * e_s);
  o.assign(size_t(V), 0.0);
  bound.assign(size_t(V), 0.0);
  for (int64_t i = 0; i < V; ++i) {
    double P = 0;
    for (int64_t c = 0; c < C; ++c) {
      o[size_t(i)] += double(wv[i * C + c]) * ctx[size_t(c)];
      P += std::fabs(double(wv[i * C + c])) * ctx_abs[size_t(c)];
    }
    bound[size_t(i)] = P * rel;
  }
}

std::vector<Case> cases() {
  return {
      // 3 heads (a partial group), C 48, r 8: T = 1, a 6-token prefill at
      // position 1, then a decode step at 7.
      {{3, 12, 8, 10, 48, 0.29f}, 0, {1, 6, 1}},
      // 5 heads, odd v and n, C 48: a 3-token chunk onto 127 cached rows, then
      // a decode at 130 (T = 131).
      {{5, 16, 16, 20, 48, 0.2f}, 127, {3, 1}},
      // Kimi K2 shapes at T = 1 and 2.
      {{64, 128, 64, 128, 512, 0.0723f}, 0, {1, 1}},
      // Kimi K2 shapes, a 2-token chunk then a decode step, ending at T = 1000.
      {{64, 128, 64, 128, 512, 0.0723f}, 997, {2, 1}},
      // 5 heads, C 512, v 17, n 24 at T = 1000 (odd) and 1001.
      {{5, 24, 64, 17, 512, 0.1f}, 999, {1, 1}},
      // C not a multiple of 16 or 8 (24), r 8, 7 heads: the tails of every loop.
      {{7, 12, 8, 10, 24, 0.29f}, 30, {4}},
      // 9 heads (a full group and a 1-head one), C 20, r 6, n 5, v 3: a
      // 5-token prefill from position 0, then 2 decode steps.
      {{9, 5, 6, 3, 20, 0.4f}, 0, {5, 1, 1}},
  };
}

std::string needs(CpuIsa isa) { return cpu_isa_unsupported(isa, host_cpu_features()); }

class MlaIsa : public ::testing::TestWithParam<CpuIsa> {};

// Every output within the f32 bound of the f64 formula.
TEST_P(MlaIsa, MatchesDoubleReference) {
  const CpuIsa isa = GetParam();
  if (std::string why = needs(isa); !why.empty()) GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const Case& k : cases()) {
    const Inputs in = make_inputs(k, seed++);
    const std::vector<float> o = run(k, in, isa, &pool);
    const MlaShape& s = k.s;
    double used = 0, rel = 0;
    std::vector<double> ref, bound;
    for (int64_t t = k.cached; t < in.T; ++t)
      for (int64_t h = 0; h < s.heads; ++h) {
        reference(s, in, t, h, ref, bound);
        for (int64_t i = 0; i < s.v; ++i) {
          const double got = o[size_t((t * s.heads + h) * s.v + i)];
          const double err = std::fabs(got - ref[size_t(i)]);
          ASSERT_LE(err, bound[size_t(i)]) << cpu_isa_name(isa) << " H " << s.heads << " C " << s.latent
                                           << " token " << t << " head " << h << " out " << i << ": " << got
                                           << " vs " << ref[size_t(i)];
          used = std::max(used, err / bound[size_t(i)]);
          rel = std::max(rel, err / std::max(1e-30, std::fabs(ref[size_t(i)])));
        }
      }
    std::printf("%s H %lld C %lld T %lld: max err %.3g of the bound (max rel err %.3g)\n", cpu_isa_name(isa),
                (long long)s.heads, (long long)s.latent, (long long)in.T, used, rel);
  }
}

// A token's output does not depend on the step it is fed in nor on the
// thread count: the cases fed token by token on 1 thread, and as one chunk
// on 3 threads, agree bitwise.
TEST_P(MlaIsa, BatchAndThreadInvariant) {
  const CpuIsa isa = GetParam();
  if (std::string why = needs(isa); !why.empty()) GTEST_SKIP() << cpu_isa_name(isa) << " skipped: this CPU " << why;
  ThreadPool one(1), three(3);
  uint32_t seed = 7;
  for (Case k : cases()) {
    const Inputs in = make_inputs(k, seed++);
    int64_t fed = 0;
    for (int64_t n : k.steps) fed += n;
    Case alone = k, chunk = k;
    alone.steps.assign(size_t(fed), 1);
    chunk.steps = {fed};
    const std::vector<float> a = run(alone, in, isa, &one), b = run(chunk, in, isa, &three);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(a[i], b[i]) << cpu_isa_name(isa) << " H " << k.s.heads << " C " << k.s.latent << " output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, MlaIsa, ::testing::Values(CpuIsa::ref, CpuIsa::avx2, CpuIsa::avx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) { return std::string(cpu_isa_name(p.param)); });

// The AVX2 and AVX-512 paths against each other: each is within its bound
// of the exact value, so they are within the sum of the two bounds.
TEST(MlaIsaPaths, Avx2AgreesWithAvx512) {
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (std::string why = needs(isa); !why.empty()) GTEST_SKIP() << cpu_isa_name(isa) << " missing: this CPU " << why;
  ThreadPool pool(2);
  uint32_t seed = 21;
  for (const Case& k : cases()) {
    const Inputs in = make_inputs(k, seed++);
    const std::vector<float> a = run(k, in, CpuIsa::avx2, &pool), b = run(k, in, CpuIsa::avx512, &pool);
    const MlaShape& s = k.s;
    std::vector<double> ref, bound;
    double used = 0;
    for (int64_t t = k.cached; t < in.T; ++t)
      for (int64_t h = 0; h < s.heads; ++h) {
        reference(s, in, t, h, ref, bound);
        for (int64_t i = 0; i < s.v; ++i) {
          const size_t at = size_t((t * s.heads + h) * s.v + i);
          const double d = std::fabs(double(a[at]) - b[at]);
          ASSERT_LE(d, 2 * bound[size_t(i)]) << "H " << s.heads << " C " << s.latent << " token " << t << " head "
                                             << h << " out " << i << ": avx2 " << a[at] << " avx512 " << b[at];
          used = std::max(used, d / (2 * bound[size_t(i)]));
        }
      }
    std::printf("avx2 vs avx512 H %lld C %lld T %lld: max difference %.3g of the two bounds\n", (long long)s.heads,
                (long long)s.latent, (long long)in.T, used);
  }
}

}  // namespace
}  // namespace nibble
