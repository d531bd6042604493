// The MoE routing kernels (moe_router.h): one block per token for scores and
// selection, one block for the grouping, a grid over (token, hidden) for the
// combine.
#include "kernels/cuda/moe_router.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxExperts = 4096;
constexpr int kMaxTopK = 32;

constexpr CudaCheck check{"moe_router"};

struct RouteParams {
  const float* logits;
  const float* bias;
  const int32_t* token_ids;
  const void* tid2eid;
  int tid2eid_is_i64;
  int64_t tid2eid_rows;
  int n_experts, top_k, scoring, norm;
  float scaling;
  int32_t* experts;
  float* weights;
  int32_t* error;
};

// (key, index) of the larger, the lower index on equal keys: a selection
// that does not depend on the thread layout.
__device__ __forceinline__ void better(float& k, int& i, float k2, int i2) {
  if (i2 >= 0 && (i < 0 || k2 > k || (k2 == k && i2 < i))) {
    k = k2;
    i = i2;
  }
}

__device__ float block_reduce(float v, bool is_max, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < int(blockDim.x >> 5); ++i) r = is_max ? fmaxf(r, red[i]) : r + red[i];
  return r;
}

__global__ void __launch_bounds__(kRouteThreads) route_kernel(const RouteParams p) {
  extern __shared__ float smem[];
  float* scores = smem;                  // [E]
  float* key = smem + p.n_experts;       // [E]
  __shared__ float red[kRouteThreads / 32];
  __shared__ float best_k[kRouteThreads / 32];
  __shared__ int best_i[kRouteThreads / 32];
  __shared__ int chosen[kMaxTopK];
  const int t = blockIdx.x, E = p.n_experts, K = p.top_k;
  const float* lg = p.logits + int64_t(t) * E;

  float m = -INFINITY;
  if (p.scoring == int(ScoringFunc::softmax))
    for (int e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, lg[e]);
  if (p.scoring == int(ScoringFunc::softmax)) m = block_reduce(m, true, red);
  float sum = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float x = lg[e];
    float s;
    if (p.scoring == int(ScoringFunc::softmax)) s = expf(x - m);
    else if (p.scoring == int(ScoringFunc::sigmoid)) s = 1.0f / (1.0f + expf(-x));
    else s = sqrtf(x > 20.0f ? x : log1pf(expf(x)));
    scores[e] = s;
    sum += s;
  }
  if (p.scoring == int(ScoringFunc::softmax)) {
    sum = block_reduce(sum, false, red);
    for (int e = threadIdx.x; e < E; e += blockDim.x) scores[e] /= sum;
  }
  __syncthreads();

  if (p.tid2eid) {
    if (threadIdx.x == 0) {
      const int64_t tok = p.token_ids[t];
      const bool tok_ok = tok >= 0 && tok < p.tid2eid_rows;
      for (int k = 0; k < K; ++k) {
        int64_t e = -1;
        if (tok_ok)
          e = p.tid2eid_is_i64 ? static_cast<const int64_t*>(p.tid2eid)[tok * K + k]
                               : static_cast<const int32_t*>(p.tid2eid)[tok * K + k];
        if (e < 0 || e >= E) {
          atomicCAS(p.error, 0, t + 1);  // the first bad token the device sees
          e = 0;                         // keeps every later index in range
        }
        chosen[k] = int(e);
      }
    }
  } else {
    for (int e = threadIdx.x; e < E; e += blockDim.x) key[e] = scores[e] + (p.bias ? p.bias[e] : 0.0f);
    __syncthreads();
    // K rounds of a block-wide argmax over the experts not yet chosen.
    for (int k = 0; k < K; ++k) {
      float bk = -INFINITY;
      int bi = -1;
      for (int e = threadIdx.x; e < E; e += blockDim.x) {
        bool taken = false;
        for (int j = 0; j < k; ++j) taken |= chosen[j] == e;
        if (!taken) better(bk, bi, key[e], e);
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float k2 = __shfl_xor_sync(0xffffffffu, bk, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        better(bk, bi, k2, i2);
      }
      if ((threadIdx.x & 31) == 0) {
        best_k[threadIdx.x >> 5] = bk;
        best_i[threadIdx.x >> 5] = bi;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float ck = best_k[0];
        int ci = best_i[0];
        for (int w = 1; w < int(blockDim.x >> 5); ++w) better(ck, ci, best_k[w], best_i[w]);
        chosen[k] = ci;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // HF: weights = scores.gather(idx); / (sum + 1e-20); * routed_scaling (f32).
    float s = 0.0f;
    for (int k = 0; k < K; ++k) s += scores[chosen[k]];
    for (int k = 0; k < K; ++k) {
      float wt = scores[chosen[k]];
      if (p.norm) wt = wt / (s + 1e-20f);
      p.experts[int64_t(t) * K + k] = chosen[k];
      p.weights[int64_t(t) * K + k] = wt * p.scaling;
    }
  }
}

// One block: per expert (a thread each, strided) count its assignments,
// then a serial prefix sum, then write them in assignment order, so the
// result is the same on every run.
__global__ void group_kernel(const int32_t* __restrict__ experts, int total, int top_k, int n_experts,
                             int32_t* offsets, int32_t* x_rows, int32_t* slots) {
  extern __shared__ int counts[];  // [E + 1]
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int c = 0;
    for (int a = 0; a < total; ++a) c += __ldg(experts + a) == e;
    counts[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0;
    for (int e = 0; e < n_experts; ++e) {
      const int c = counts[e];
      counts[e] = at;
      offsets[e] = at;
      at += c;
    }
    offsets[n_experts] = at;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int pos = counts[e];
    for (int a = 0; a < total; ++a)
      if (__ldg(experts + a) == e) {
        x_rows[pos] = a / top_k;
        slots[a] = pos++;
      }
  }
}

__global__ void combine_kernel(const float* __restrict__ y_assign, const int32_t* __restrict__ slots,
                               const float* __restrict__ weights, const float* __restrict__ shared, int top_k,
                               int64_t hidden, float* __restrict__ y) {
  const int64_t t = blockIdx.y;
  for (int64_t d = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; d < hidden; d += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < top_k; ++k)
      acc += weights[t * top_k + k] * y_assign[int64_t(slots[t * top_k + k]) * hidden + d];
    if (shared) acc += shared[t * hidden + d];
    y[t * hidden + d] = acc;
  }
}

}  // namespace

void moe_route_launch(const RouteDeviceArgs& a) {
  if (a.n_experts <= 0 || a.n_experts > kMaxExperts) fail("moe_router: ", a.n_experts, " experts (1..", kMaxExperts, ")");
  if (a.top_k <= 0 || a.top_k > kMaxTopK || a.top_k > a.n_experts)
    fail("moe_router: top_k ", a.top_k, " must be in 1..", std::min<int64_t>(kMaxTopK, a.n_experts));
  if (a.tid2eid && (!a.token_ids || a.tid2eid_rows <= 0))
    fail("moe_router: hash routing (tid2eid) needs token ids and a non-empty table");
  if (!a.error) fail("moe_router: no error flag");
  if (a.n <= 0) return;
  RouteParams p{a.logits, a.bias, a.token_ids, a.tid2eid, a.tid2eid_is_i64 ? 1 : 0, a.tid2eid_rows,
                int(a.n_experts), int(a.top_k), int(a.scoring), a.norm_topk_prob ? 1 : 0, a.routed_scaling,
                a.experts, a.weights, a.error};
  const size_t smem = size_t(a.n_experts) * 2 * sizeof(float);
  auto s = static_cast<cudaStream_t>(a.stream);
  if (smem > 48 * 1024) check(cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                              "cudaFuncSetAttribute");
  route_kernel<<<unsigned(a.n), kRouteThreads, smem, s>>>(p);
  check(cudaGetLastError(), "route kernel launch");
}

void moe_group_launch(const int32_t* experts, int64_t n, int64_t top_k, int64_t n_experts, int32_t* offsets,
                      int32_t* x_rows, int32_t* slots, void* stream) {
  if (n_experts <= 0 || n_experts > kMaxExperts) fail("moe_router: ", n_experts, " experts (1..", kMaxExperts, ")");
  if (n * top_k > (int64_t(1) << 30)) fail("moe_router: ", n, " x ", top_k, " assignments");
  group_kernel<<<1, 1024, size_t(n_experts + 1) * sizeof(int), static_cast<cudaStream_t>(stream)>>>(
      experts, int(n * top_k), int(top_k), int(n_experts), offsets, x_rows, slots);
  check(cudaGetLastError(), "group kernel launch");
}

void moe_combine_launch(const float* y_assign, const int32_t* slots, const float* weights, const float* shared,
                        int64_t n, int64_t top_k, int64_t hidden, float* y, void* stream) {
  if (n <= 0 || hidden <= 0) return;
  if (n > 65535) fail("moe_router: combine of ", n, " tokens (at most 65535 per launch)");
  const dim3 grid(unsigned(std::min<int64_t>((hidden + 255) / 256, 64)), unsigned(n));
  combine_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(y_assign, slots, weights, shared, int(top_k),
                                                                      hidden, y);
  check(cudaGetLastError(), "combine kernel launch");
}

RouteHostResult moe_route_run_host(const MoeWeights& w, const std::vector<float>& logits, const int32_t* token_ids,
                                   int64_t n) {
  const int64_t E = w.n_experts, K = w.top_k;
  if (int64_t(logits.size()) != n * E) fail("moe_router: logits has ", logits.size(), " values, expected ", n, " x ", E);
  DeviceBuffer<float> d_logits(logits.size(), logits.data());
  DeviceBuffer<float> d_bias(w.bias ? size_t(E) : 0, w.bias);
  DeviceBuffer<int32_t> d_tok(token_ids ? size_t(n) : 0, token_ids);
  const size_t table_bytes = w.tid2eid ? size_t(w.tid2eid_rows * K) * (w.tid2eid_is_i64 ? 8 : 4) : 0;
  DeviceBuffer<uint8_t> d_table(table_bytes, static_cast<const uint8_t*>(w.tid2eid));
  DeviceBuffer<int32_t> d_experts(size_t(n * K)), d_off(size_t(E + 1)), d_rows(size_t(n * K)), d_slots(size_t(n * K)),
      d_err(1);
  DeviceBuffer<float> d_weights(size_t(n * K));
  RouteDeviceArgs a;
  a.logits = d_logits.p;
  a.bias = w.bias ? d_bias.p : nullptr;
  a.token_ids = token_ids ? d_tok.p : nullptr;
  a.tid2eid = w.tid2eid ? d_table.p : nullptr;
  a.tid2eid_is_i64 = w.tid2eid_is_i64;
  a.tid2eid_rows = w.tid2eid_rows;
  a.n = n;
  a.n_experts = E;
  a.top_k = K;
  a.scoring = w.scoring;
  a.norm_topk_prob = w.norm_topk_prob;
  a.routed_scaling = w.routed_scaling;
  a.experts = d_experts.p;
  a.weights = d_weights.p;
  a.error = d_err.p;
  moe_route_launch(a);
  moe_group_launch(d_experts.p, n, K, E, d_off.p, d_rows.p, d_slots.p);
  check(cudaDeviceSynchronize(), "routing kernels");
  const int32_t err = d_err.download(1)[0];
  if (err) fail("MoE hash routing: token ", err - 1, " has an id or tid2eid entry outside the table / experts");
  RouteHostResult r;
  r.experts = d_experts.download(size_t(n * K));
  r.weights = d_weights.download(size_t(n * K));
  r.offsets = d_off.download(size_t(E + 1));
  r.x_rows = d_rows.download(size_t(n * K));
  r.slots = d_slots.download(size_t(n * K));
  return r;
}

std::vector<float> moe_combine_run_host(const std::vector<float>& y_assign, const std::vector<int32_t>& slots,
                                        const std::vector<float>& weights, const std::vector<float>& shared,
                                        int64_t n, int64_t top_k, int64_t hidden) {
  DeviceBuffer<float> d_ya(y_assign.size(), y_assign.data()), d_w(weights.size(), weights.data()),
      d_sh(shared.size(), shared.data()), d_y(size_t(n * hidden));
  DeviceBuffer<int32_t> d_s(slots.size(), slots.data());
  moe_combine_launch(d_ya.p, d_s.p, d_w.p, shared.empty() ? nullptr : d_sh.p, n, top_k, hidden, d_y.p);
  check(cudaDeviceSynchronize(), "combine kernel");
  return d_y.download(size_t(n * hidden));
}

}  // namespace nibble
