// The GPU hyper-connections (kernels/cuda/hyper_conn.h) against
// model/deepseek_v4_hc.cpp's hc_pre / hc_post / hc_head. The GPU side gets
// the mixes the CPU computes (its RMSNorm and linear are checked in
// row_ops_gpu_test.cpp), so what differs is only expf (2 ulp on the GPU
// against the host's <= 1) and FMA contraction. Skipped, saying why,
// without a CUDA device.
//
// Bounds: fn has weights of sd 1/sqrt(N*D) on unit-RMS rows, so the mixes
// are ~N(0, 1) and the sigmoid arguments m * scale + base below 16. pre /
// post = sigmoid: one expf, one add, one division (6 ulp) plus the argument
// rounded once more or less (an FMA on the GPU: 2^-21 absolute, which moves
// the sigmoid by at most that relative), taken as 2^-19 relative. comb: the row softmax within 6 ulp, then
// 20 Sinkhorn rounds; each normalisation is non-expansive in Hilbert's
// projective metric (Birkhoff), so the input's error does not grow and each
// round adds its own roundings (a sum of N = 4 and a division, twice):
// 20 * 2 * 6 ulp = 240 ulp < 2^-16 relative. collapsed / head: a sum of N
// products of those: 2^-18 sum |pre_k s_k|. post mix: N + 1 products and
// sums on each side: 2^-20 (|post| |out| + sum_j |comb| |s_j|).
#include <gtest/gtest.h>

#include <cmath>

#include "device/cuda_device.h"
#include "kernels/cuda/hyper_conn.h"
#include "kernels/linear.h"
#include "kernels/random_weights.h"
#include "model/deepseek_v4_hc.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.0f) {
  std::vector<float> v(n);
  random_normal(v.data(), int64_t(n), seed, sd);
  return v;
}

// The CPU's mixes: the unweighted RMSNorm of the flattened streams through fn.
std::vector<float> cpu_mixes(const BoundLinear& fn, const HcShape& s, const std::vector<float>& streams, int64_t n) {
  std::vector<float> normed(streams.size()), mixes(size_t(n * fn.rows()));
  rms_norm(streams.data(), n, s.streams * s.hidden, nullptr, s.rms_eps, normed.data());
  fn.run(normed.data(), n, mixes.data(), nullptr);
  return mixes;
}

WeightView f32_view(const std::vector<float>& w, int64_t rows, int64_t cols) {
  WeightView v;
  v.format = Format::f32;
  v.rows = rows;
  v.cols = cols;
  v.data = reinterpret_cast<const uint8_t*>(w.data());
  v.name = "hc_fn";
  return v;
}

TEST(HyperConnGpu, PreMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t N : {1, 4, 8})
    for (int64_t D : {1, 7, 300}) {
      const int64_t n = 5, width = (2 + N) * N;
      HcShape s;
      s.streams = N;
      s.hidden = D;
      const std::vector<float> fn_w = randn(size_t(width * N * D), 1, 1.0f / std::sqrt(float(N * D)));
      HcWeights w;
      w.fn = BoundLinear{f32_view(fn_w, width, N * D), linear_ref};
      w.base = randn(size_t(width), 2);
      w.scale = {0.7f, 1.3f, 2.0f};
      const std::vector<float> streams = randn(size_t(n * N * D), 3, 2.0f);
      std::vector<float> c(size_t(n * D)), p(size_t(n * N)), comb(size_t(n * N * N));
      hc_pre(w, s, streams.data(), n, c.data(), p.data(), comb.data(), nullptr);

      HcDeviceParams dp;
      dp.streams = N;
      dp.hidden = D;
      dp.sinkhorn_iters = s.sinkhorn_iters;
      dp.hc_eps = s.hc_eps;
      const HcPreHost got = cuda_hc_pre_finish_host(dp, w.base, w.scale, cpu_mixes(w.fn, s, streams, n), streams, n);
      for (size_t i = 0; i < p.size(); ++i) ASSERT_LE(std::fabs(got.post[i] - p[i]), 0x1p-19 * std::fabs(p[i])) << i;
      for (size_t i = 0; i < comb.size(); ++i)
        ASSERT_LE(std::fabs(got.comb[i] - comb[i]), 0x1p-16 * std::fabs(comb[i])) << "N " << N << " comb " << i;
      // The pre weights themselves are not an output; their bound carries into the collapse.
      for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < D; ++d) {
          double mag = 0;
          for (int64_t k = 0; k < N; ++k) mag += 2.0 * std::fabs(streams[size_t((t * N + k) * D + d)]);  // pre < 1 + eps
          ASSERT_LE(std::fabs(got.collapsed[size_t(t * D + d)] - c[size_t(t * D + d)]), 0x1p-18 * mag + 1e-30)
              << "N " << N << " D " << D << " token " << t << " channel " << d;
        }
    }
}

TEST(HyperConnGpu, PostMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t N : {1, 4, 8}) {
    const int64_t n = 3, D = 129;
    HcShape s;
    s.streams = N;
    s.hidden = D;
    const std::vector<float> out = randn(size_t(n * D), 4), post = randn(size_t(n * N), 5),
                             comb = randn(size_t(n * N * N), 6), streams = randn(size_t(n * N * D), 7);
    std::vector<float> want = streams;
    hc_post(s, out.data(), post.data(), comb.data(), n, want.data(), nullptr);
    const std::vector<float> got = cuda_hc_post_host(N, D, out, post, comb, n, streams);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = 0; k < N; ++k)
        for (int64_t d = 0; d < D; ++d) {
          double mag = std::fabs(post[size_t(t * N + k)] * out[size_t(t * D + d)]);
          for (int64_t j = 0; j < N; ++j)
            mag += std::fabs(comb[size_t(t * N * N + j * N + k)] * streams[size_t((t * N + j) * D + d)]);
          const size_t i = size_t((t * N + k) * D + d);
          ASSERT_LE(std::fabs(got[i] - want[i]), (N + 2) * 0x1p-23 * mag + 1e-30) << "N " << N << " element " << i;
        }
  }
}

TEST(HyperConnGpu, HeadMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  const int64_t N = 4, D = 333, n = 4;
  HcShape s;
  s.streams = N;
  s.hidden = D;
  const std::vector<float> fn_w = randn(size_t(N * N * D), 8, 1.0f / std::sqrt(float(N * D)));
  HcHeadWeights w;
  w.fn = BoundLinear{f32_view(fn_w, N, N * D), linear_ref};
  w.base = randn(size_t(N), 9);
  w.scale = {0.9f};
  const std::vector<float> streams = randn(size_t(n * N * D), 10, 2.0f);
  std::vector<float> want(size_t(n * D));
  hc_head(w, s, streams.data(), n, want.data(), nullptr);
  HcDeviceParams dp;
  dp.streams = N;
  dp.hidden = D;
  dp.hc_eps = s.hc_eps;
  std::vector<float> normed(streams.size()), mixes(size_t(n * N));
  rms_norm(streams.data(), n, N * D, nullptr, s.rms_eps, normed.data());
  w.fn.run(normed.data(), n, mixes.data(), nullptr);
  const std::vector<float> got = cuda_hc_head_finish_host(dp, w.base, w.scale, mixes, streams, n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) {
      double mag = 0;
      for (int64_t k = 0; k < N; ++k) mag += 2.0 * std::fabs(streams[size_t((t * N + k) * D + d)]);
      ASSERT_LE(std::fabs(got[size_t(t * D + d)] - want[size_t(t * D + d)]), 0x1p-18 * mag + 1e-30) << t << " " << d;
    }
}

TEST(HyperConnGpu, BadShapesAreClear) {
  HcDeviceParams p;
  p.streams = 9;  // more than kMaxHcStreams
  p.hidden = 4;
  EXPECT_THROW(cuda_hc_pre_finish_host(p, {}, {}, {}, {}, 1), Error);
  p.streams = 4;
  EXPECT_THROW(cuda_hc_pre_finish_host(p, std::vector<float>(24), {1, 1}, std::vector<float>(24),
                                       std::vector<float>(16), 1),
               Error);  // scale has 2 values, not 3
  EXPECT_THROW(cuda_hc_post_host(4, 4, std::vector<float>(4), std::vector<float>(4), std::vector<float>(15), 1,
                                 std::vector<float>(16)),
               Error);  // comb is not [1, 16]
}

}  // namespace
}  // namespace nibble
