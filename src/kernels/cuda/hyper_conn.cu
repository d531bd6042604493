// The hyper-connection kernels: one block per token for the pre / head
// collapse (thread 0 does the token's weights in the CPU's order, the block
// spreads the collapse over D), one thread per (token, channel) for the post
// mix (it owns that channel of every stream, so the update in place is safe).
#include "kernels/cuda/hyper_conn.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"hyper_conn"};

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void hc_pre_finish_kernel(HcDeviceParams p, const float* __restrict__ mixes,
                                     const float* __restrict__ streams, float* __restrict__ collapsed,
                                     float* __restrict__ post, float* __restrict__ comb) {
  __shared__ float pre[kMaxHcStreams];
  const int64_t t = blockIdx.x, N = p.streams, D = p.hidden;
  if (threadIdx.x == 0) {
    const float* m = mixes + t * (2 + N) * N;
    float* pt = post + t * N;
    float* c = comb + t * N * N;
    for (int64_t k = 0; k < N; ++k) {
      pre[k] = sigmoid(m[k] * p.scale[0] + p.base[k]) + p.hc_eps;
      pt[k] = 2.0f * sigmoid(m[N + k] * p.scale[1] + p.base[N + k]);
    }
    // Row softmax of the N x N logits (the sum in double, as softmax_inplace), + eps.
    for (int64_t j = 0; j < N; ++j) {
      float* row = c + j * N;
      float mx = -INFINITY;
      for (int64_t k = 0; k < N; ++k) {
        row[k] = m[2 * N + j * N + k] * p.scale[2] + p.base[2 * N + j * N + k];
        mx = fmaxf(mx, row[k]);
      }
      double sum = 0;
      for (int64_t k = 0; k < N; ++k) sum += (row[k] = expf(row[k] - mx));
      const float inv = float(1.0 / sum);
      for (int64_t k = 0; k < N; ++k) row[k] = row[k] * inv + p.hc_eps;
    }
    // Sinkhorn: columns, then (iters - 1) x (rows, columns).
    for (int64_t it = 0; it < p.sinkhorn_iters; ++it) {
      if (it > 0)
        for (int64_t j = 0; j < N; ++j) {
          float sum = 0;
          for (int64_t k = 0; k < N; ++k) sum += c[j * N + k];
          for (int64_t k = 0; k < N; ++k) c[j * N + k] /= sum + p.hc_eps;
        }
      float colsum[kMaxHcStreams];
      for (int64_t k = 0; k < N; ++k) colsum[k] = 0;
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < N; ++k) colsum[k] += c[j * N + k];
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < N; ++k) c[j * N + k] /= colsum[k] + p.hc_eps;
    }
  }
  __syncthreads();
  const float* s = streams + t * N * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t k = 0; k < N; ++k) acc += pre[k] * s[k * D + d];
    collapsed[t * D + d] = acc;
  }
}

__global__ void hc_post_kernel(int64_t N, int64_t D, const float* __restrict__ out, const float* __restrict__ post,
                               const float* __restrict__ comb, int64_t n, float* __restrict__ streams) {
  const int64_t total = n * D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i % D;
    float* x = streams + t * N * D + d;
    const float* c = comb + t * N * N;
    float old[kMaxHcStreams];
    for (int64_t j = 0; j < N; ++j) old[j] = x[j * D];
    for (int64_t k = 0; k < N; ++k) {
      float acc = 0;
      for (int64_t j = 0; j < N; ++j) acc += c[j * N + k] * old[j];
      x[k * D] = post[t * N + k] * out[t * D + d] + acc;
    }
  }
}

__global__ void hc_head_finish_kernel(HcDeviceParams p, const float* __restrict__ mixes,
                                      const float* __restrict__ streams, float* __restrict__ y) {
  __shared__ float pre[kMaxHcStreams];
  const int64_t t = blockIdx.x, N = p.streams, D = p.hidden;
  if (threadIdx.x < N) pre[threadIdx.x] = sigmoid(mixes[t * N + threadIdx.x] * p.scale[0] + p.base[threadIdx.x]) + p.hc_eps;
  __syncthreads();
  const float* s = streams + t * N * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t k = 0; k < N; ++k) acc += pre[k] * s[k * D + d];
    y[t * D + d] = acc;
  }
}

void check_shape(const HcDeviceParams& p, const char* op) {
  if (p.streams <= 0 || p.streams > kMaxHcStreams || p.hidden <= 0)
    fail(op, ": ", p.streams, " streams of ", p.hidden, " (the GPU kernels take 1..", kMaxHcStreams, " streams)");
}

}  // namespace

void cuda_hc_pre_finish(const HcDeviceParams& p, const float* mixes, const float* streams, int64_t n,
                        float* collapsed, float* post, float* comb, void* stream) {
  check_shape(p, "cuda_hc_pre_finish");
  if (n <= 0) return;
  hc_pre_finish_kernel<<<unsigned(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, mixes, streams, collapsed,
                                                                                   post, comb);
  check(cudaGetLastError(), "hc_pre launch");
}

void cuda_hc_post(int64_t streams_n, int64_t hidden, const float* out, const float* post, const float* comb,
                  int64_t n, float* streams, void* stream) {
  check_shape(HcDeviceParams{streams_n, hidden}, "cuda_hc_post");
  if (n <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n * hidden + 255) / 256, 8192));
  hc_post_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(streams_n, hidden, out, post, comb, n,
                                                                        streams);
  check(cudaGetLastError(), "hc_post launch");
}

void cuda_hc_head_finish(const HcDeviceParams& p, const float* mixes, const float* streams, int64_t n, float* y,
                         void* stream) {
  check_shape(p, "cuda_hc_head_finish");
  if (n <= 0) return;
  hc_head_finish_kernel<<<unsigned(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, mixes, streams, y);
  check(cudaGetLastError(), "hc_head launch");
}

// ---- host round trips ----

HcPreHost cuda_hc_pre_finish_host(HcDeviceParams p, const std::vector<float>& base, const std::vector<float>& scale,
                                  const std::vector<float>& mixes, const std::vector<float>& streams, int64_t n) {
  check_shape(p, "cuda_hc_pre_finish_host");
  const int64_t N = p.streams, D = p.hidden, width = (2 + N) * N;
  if (int64_t(base.size()) != width || scale.size() != 3 || int64_t(mixes.size()) != n * width ||
      int64_t(streams.size()) != n * N * D)
    fail("cuda_hc_pre_finish_host: base [", width, "], scale [3], mixes [", n, ", ", width, "], streams [", n, ", ",
         N * D, "] expected");
  DeviceBuffer<float> db(base.size(), base.data()), dsc(scale.size(), scale.data()), dm(mixes.size(), mixes.data()),
      ds(streams.size(), streams.data()), dc(size_t(n * D)), dp(size_t(n * N)), dcomb(size_t(n * N * N));
  p.base = db.p;
  p.scale = dsc.p;
  cuda_hc_pre_finish(p, dm.p, ds.p, n, dc.p, dp.p, dcomb.p);
  return HcPreHost{dc.download(size_t(n * D)), dp.download(size_t(n * N)), dcomb.download(size_t(n * N * N))};
}

std::vector<float> cuda_hc_post_host(int64_t streams_n, int64_t hidden, const std::vector<float>& out,
                                     const std::vector<float>& post, const std::vector<float>& comb, int64_t n,
                                     std::vector<float> streams) {
  const int64_t N = streams_n, D = hidden;
  if (int64_t(out.size()) != n * D || int64_t(post.size()) != n * N || int64_t(comb.size()) != n * N * N ||
      int64_t(streams.size()) != n * N * D)
    fail("cuda_hc_post_host: out [", n, ", ", D, "], post [", n, ", ", N, "], comb [", n, ", ", N * N,
         "], streams [", n, ", ", N * D, "] expected");
  DeviceBuffer<float> dout(out.size(), out.data()), dp(post.size(), post.data()), dc(comb.size(), comb.data()),
      ds(streams.size(), streams.data());
  cuda_hc_post(N, D, dout.p, dp.p, dc.p, n, ds.p);
  return ds.download(streams.size());
}

std::vector<float> cuda_hc_head_finish_host(HcDeviceParams p, const std::vector<float>& base,
                                            const std::vector<float>& scale, const std::vector<float>& mixes,
                                            const std::vector<float>& streams, int64_t n) {
  check_shape(p, "cuda_hc_head_finish_host");
  const int64_t N = p.streams, D = p.hidden;
  if (int64_t(base.size()) != N || scale.size() != 1 || int64_t(mixes.size()) != n * N ||
      int64_t(streams.size()) != n * N * D)
    fail("cuda_hc_head_finish_host: base [", N, "], scale [1], mixes [", n, ", ", N, "], streams [", n, ", ", N * D,
         "] expected");
  DeviceBuffer<float> db(base.size(), base.data()), dsc(scale.size(), scale.data()), dm(mixes.size(), mixes.data()),
      ds(streams.size(), streams.data()), dy(size_t(n * D));
  p.base = db.p;
  p.scale = dsc.p;
  cuda_hc_head_finish(p, dm.p, ds.p, n, dy.p);
  return dy.download(size_t(n * D));
}

}  // namespace nibble
