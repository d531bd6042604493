// The attention-with-sinks kernel: one block per (token, head). Warps
// compute the logits (a key per warp in turn, lanes over the channels,
// shuffle tree), the block takes their max with the sink, then each thread
// owns channels and walks the keys in order accumulating p_j k_j (the
// denominator the same way, in every thread), as attend_cpu does per head.
#include "kernels/cuda/attention_sinks.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"attention_sinks"};
constexpr int kThreads = 128;

__device__ const float* key_row(const float* ring, const float* entries, int32_t idx, int64_t dim) {
  return idx >= 0 ? ring + int64_t(idx) * dim : entries + int64_t(-1 - idx) * dim;
}

__global__ void __launch_bounds__(kThreads) attention_sinks_kernel(AttentionSinksArgs a) {
  __shared__ float red[kThreads / 32];
  __shared__ float mx_shared;
  const int64_t th = blockIdx.x, t = th / a.heads, h = th % a.heads;
  const float* q = a.q + th * a.dim;
  const int32_t* keys = a.keys + t * a.max_keys;
  const int64_t count = a.counts[t];
  float* logit = a.logits + th * a.max_keys;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float mx = a.sinks[h];
  for (int64_t j = warp; j < count; j += kThreads / 32) {
    const float* k = key_row(a.ring, a.entries, keys[j], a.dim);
    float acc = 0;
    for (int64_t c = lane; c < a.dim; c += 32) acc += q[c] * k[c];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    const float l = acc * a.scale;
    if (lane == 0) logit[j] = l;
    mx = fmaxf(mx, l);
  }
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = red[0];
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
    mx_shared = m;
  }
  __syncthreads();  // also orders every logit[] write before the reads below
  mx = mx_shared;
  float denom = expf(a.sinks[h] - mx);
  for (int64_t c0 = 0; c0 < a.dim; c0 += kThreads) {
    const int64_t c = c0 + threadIdx.x;
    float acc = 0, den = denom;
    for (int64_t j = 0; j < count; ++j) {
      const float p = expf(logit[j] - mx);
      den += p;
      if (c < a.dim) acc += p * key_row(a.ring, a.entries, keys[j], a.dim)[c];
    }
    if (c < a.dim) a.o[th * a.dim + c] = acc * (1.0f / den);
  }
}

}  // namespace

void cuda_attention_sinks(const AttentionSinksArgs& a) {
  if (a.heads <= 0 || a.dim <= 0 || a.max_keys < 0)
    fail("attention_sinks: ", a.heads, " heads of ", a.dim, " channels, ", a.max_keys, " keys at most");
  if (a.n <= 0) return;
  attention_sinks_kernel<<<unsigned(a.n * a.heads), kThreads, 0, static_cast<cudaStream_t>(a.stream)>>>(a);
  check(cudaGetLastError(), "kernel launch");
}

std::vector<float> cuda_attention_sinks_host(const std::vector<float>& q, const std::vector<float>& ring,
                                             const std::vector<float>& entries, const std::vector<int32_t>& keys,
                                             const std::vector<int32_t>& counts, const std::vector<float>& sinks,
                                             int64_t n, int64_t heads, int64_t dim, int64_t max_keys, float scale) {
  if (int64_t(q.size()) != n * heads * dim || int64_t(keys.size()) != n * max_keys || int64_t(counts.size()) != n ||
      int64_t(sinks.size()) != heads || dim <= 0 || ring.size() % size_t(dim) || entries.size() % size_t(dim))
    fail("cuda_attention_sinks_host: q [", n, ", ", heads, ", ", dim, "], keys [", n, ", ", max_keys, "], counts [",
         n, "], sinks [", heads, "] and pools of whole rows expected");
  const int64_t ring_rows = int64_t(ring.size()) / dim, entry_rows = int64_t(entries.size()) / dim;
  for (int64_t t = 0; t < n; ++t) {
    if (counts[size_t(t)] < 0 || counts[size_t(t)] > max_keys)
      fail("cuda_attention_sinks_host: token ", t, " has ", counts[size_t(t)], " keys, at most ", max_keys);
    for (int32_t j = 0; j < counts[size_t(t)]; ++j) {
      const int32_t i = keys[size_t(t * max_keys + j)];
      if (i >= ring_rows || -1 - int64_t(i) >= entry_rows)
        fail("cuda_attention_sinks_host: token ", t, " key ", j, " = ", i, " is outside the ring (", ring_rows,
             " rows) and the entries (", entry_rows, ")");
    }
  }
  DeviceBuffer<float> dq(q.size(), q.data()), dr(ring.size(), ring.data()), de(entries.size(), entries.data()),
      ds(sinks.size(), sinks.data()), dl(size_t(n * heads * std::max<int64_t>(max_keys, 1))), dout(q.size());
  DeviceBuffer<int32_t> dk(keys.size(), keys.data()), dc(counts.size(), counts.data());
  AttentionSinksArgs a;
  a.q = dq.p;
  a.ring = dr.p;
  a.entries = de.p;
  a.keys = dk.p;
  a.counts = dc.p;
  a.sinks = ds.p;
  a.logits = dl.p;
  a.o = dout.p;
  a.n = n;
  a.heads = heads;
  a.dim = dim;
  a.max_keys = max_keys;
  a.scale = scale;
  cuda_attention_sinks(a);
  return dout.download(q.size());
}

}  // namespace nibble
