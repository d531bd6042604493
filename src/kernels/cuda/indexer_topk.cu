// The indexer kernels: scores with one warp per (query, entry) in turn
// (lanes over the channels, heads in order as the CPU sums them), then the
// top k by block-wide argmax rounds.
#include "kernels/cuda/indexer_topk.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"indexer_topk"};
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) scores_kernel(IndexerTopkArgs a) {
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t vis = a.visible[t];
  const float* qt = a.q + t * a.heads * a.dim;
  const float* hw = a.hw + t * a.heads;
  for (int64_t s = warp; s < vis; s += kThreads / 32) {
    const float* k = a.entries + s * a.dim;
    float acc = 0;
    for (int64_t h = 0; h < a.heads; ++h) {
      float dot = 0;
      for (int64_t c = lane; c < a.dim; c += 32) dot += qt[h * a.dim + c] * k[c];
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      acc += fmaxf(dot, 0.0f) * a.softmax_scale * (hw[h] * a.weights_scale);
    }
    if (lane == 0) a.scores[t * a.max_visible + s] = acc;
  }
}

// (score, index) of the better: the higher score, the lower index on ties.
__device__ void better(float& v, int64_t& i, float v2, int64_t i2) {
  if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) {
    v = v2;
    i = i2;
  }
}

__global__ void __launch_bounds__(kThreads) select_kernel(IndexerTopkArgs a) {
  __shared__ float rv[kThreads / 32];
  __shared__ int64_t ri[kThreads / 32];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t vis = a.visible[t], k = vis < a.topk ? vis : a.topk;
  float* sc = a.scores + t * a.max_visible;
  for (int64_t j = threadIdx.x; j < a.topk; j += kThreads) a.selected[t * a.topk + j] = -1;
  if (threadIdx.x == 0) a.counts[t] = int32_t(k);
  __syncthreads();
  for (int64_t round = 0; round < k; ++round) {
    float v = -INFINITY;
    int64_t i = -1;
    for (int64_t s = threadIdx.x; s < vis; s += kThreads)
      if (sc[s] != -INFINITY) better(v, i, sc[s], s);  // -inf: taken in an earlier round
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
      const int64_t i2 = __shfl_xor_sync(0xffffffffu, i, o);
      better(v, i, v2, i2);
    }
    if (lane == 0) {
      rv[warp] = v;
      ri[warp] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = rv[0];
      int64_t bi = ri[0];
      for (int w = 1; w < kThreads / 32; ++w) better(bv, bi, rv[w], ri[w]);
      a.selected[t * a.topk + round] = int32_t(bi);
      if (bi >= 0) sc[bi] = -INFINITY;  // taken: out of the next rounds
    }
    __syncthreads();
  }
}

}  // namespace

void cuda_indexer_topk(const IndexerTopkArgs& a) {
  if (a.heads <= 0 || a.dim <= 0 || a.topk <= 0 || a.max_visible < 0)
    fail("indexer_topk: ", a.heads, " heads of ", a.dim, ", top ", a.topk, " of at most ", a.max_visible);
  if (a.n <= 0) return;
  const auto st = static_cast<cudaStream_t>(a.stream);
  scores_kernel<<<unsigned(a.n), kThreads, 0, st>>>(a);
  check(cudaGetLastError(), "scores launch");
  select_kernel<<<unsigned(a.n), kThreads, 0, st>>>(a);
  check(cudaGetLastError(), "select launch");
}

IndexerTopkHost cuda_indexer_topk_host(const std::vector<float>& q, const std::vector<float>& hw,
                                       const std::vector<float>& entries, const std::vector<int32_t>& visible,
                                       int64_t n, int64_t heads, int64_t dim, int64_t topk) {
  if (int64_t(q.size()) != n * heads * dim || int64_t(hw.size()) != n * heads || int64_t(visible.size()) != n ||
      dim <= 0 || entries.size() % size_t(dim))
    fail("cuda_indexer_topk_host: q [", n, ", ", heads, ", ", dim, "], hw [", n, ", ", heads, "], visible [", n,
         "] and whole entry rows expected");
  const int64_t n_entries = int64_t(entries.size()) / dim;
  int64_t max_visible = 0;
  for (int32_t v : visible) {
    if (v < 0 || v > n_entries) fail("cuda_indexer_topk_host: ", v, " visible of ", n_entries, " entries");
    max_visible = std::max<int64_t>(max_visible, v);
  }
  DeviceBuffer<float> dq(q.size(), q.data()), dh(hw.size(), hw.data()), de(entries.size(), entries.data()),
      ds(size_t(n * std::max<int64_t>(max_visible, 1)));
  DeviceBuffer<int32_t> dv(visible.size(), visible.data()), dsel(size_t(n * topk)), dc(static_cast<size_t>(n));
  IndexerTopkArgs a;
  a.q = dq.p;
  a.hw = dh.p;
  a.entries = de.p;
  a.visible = dv.p;
  a.scores = ds.p;
  a.selected = dsel.p;
  a.counts = dc.p;
  a.n = n;
  a.heads = heads;
  a.dim = dim;
  a.max_visible = std::max<int64_t>(max_visible, 1);
  a.topk = topk;
  a.softmax_scale = 1.0f / std::sqrt(float(dim));
  a.weights_scale = 1.0f / std::sqrt(float(heads));
  // The scores as computed, before the rounds overwrite the chosen ones.
  IndexerTopkHost r;
  {
    const auto st = static_cast<cudaStream_t>(a.stream);
    scores_kernel<<<unsigned(n), kThreads, 0, st>>>(a);
    check(cudaGetLastError(), "scores launch");
    r.scores = ds.download(size_t(n * a.max_visible));
    select_kernel<<<unsigned(n), kThreads, 0, st>>>(a);
    check(cudaGetLastError(), "select launch");
  }
  r.selected = dsel.download(size_t(n * topk));
  r.counts = dc.download(size_t(n));
  return r;
}

}  // namespace nibble
