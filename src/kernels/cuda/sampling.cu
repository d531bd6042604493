// The sampling kernels: keys (the CPU's order as unsigned 64-bit integers),
// CUB's segmented radix sort, then one block per row walking its sorted
// candidates in chunks of the block's width with block-wide reductions and
// scans in double.
#include "kernels/cuda/sampling.h"

#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"sampling"};
constexpr int kThreads = 256;

// (order-reversed logit bits << 32) | id, as runtime/sampler.cpp: ascending
// keys are logits descending, ids ascending on ties; -0 ties with +0.
__global__ void keys_kernel(const float* __restrict__ logits, int64_t rows, int64_t vocab, int64_t ld,
                            uint64_t* __restrict__ keys, int64_t* __restrict__ offsets) {
  const int64_t total = rows * vocab;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / vocab, c = i % vocab;
    float f = logits[r * ld + c];
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    keys[i] = (uint64_t(~ascending) << 32) | uint64_t(uint32_t(c));
  }
  const int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (g <= rows) offsets[g] = g * vocab;
}

struct Scratch {
  uint64_t* keys;
  uint64_t* sorted;
  int64_t* offsets;
  void* temp;
  size_t temp_bytes;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t rows, int64_t vocab) {
  size_t bytes = 0;
  check(cub::DeviceSegmentedRadixSort::SortKeys(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                static_cast<uint64_t*>(nullptr), rows * vocab, rows,
                                                static_cast<const int64_t*>(nullptr),
                                                static_cast<const int64_t*>(nullptr)),
        "sort size");
  return bytes;
}

Scratch carve(void* ws, int64_t rows, int64_t vocab) {
  auto* base = static_cast<uint8_t*>(ws);
  const size_t kb = align256(size_t(rows * vocab) * 8);
  Scratch s;
  s.keys = reinterpret_cast<uint64_t*>(base);
  s.sorted = reinterpret_cast<uint64_t*>(base + kb);
  s.offsets = reinterpret_cast<int64_t*>(base + 2 * kb);
  s.temp = base + 2 * kb + align256(size_t(rows + 1) * 8);
  s.temp_bytes = sort_temp_bytes(rows, vocab);
  return s;
}

using BlockReduce = cub::BlockReduce<double, kThreads>;
using BlockScan = cub::BlockScan<double, kThreads>;

__device__ float logit_of(const float* row, uint64_t key) {
  float f = row[uint32_t(key)];
  return f;
}

// The first index j < n of the sequence v(0..n) whose inclusive prefix sum
// passes `target` (>= when at_least, else >), or n when none does.
template <class V>
__device__ int64_t first_prefix_reaching(V v, int64_t n, double target, bool at_least, void* smem_scan,
                                         int64_t* found) {
  auto& ts = *static_cast<typename BlockScan::TempStorage*>(smem_scan);
  double carry = 0;
  __syncthreads();  // every thread has read *found's previous value
  if (threadIdx.x == 0) *found = n;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const double x = i < n ? v(i) : 0.0;
    double incl, total;
    BlockScan(ts).InclusiveSum(x, incl, total);
    incl += carry;
    const bool hit = i < n && (at_least ? incl >= target : incl > target);
    // Every hit bids: the lowest index wins (hits form a suffix of the chunk
    // in exact arithmetic; bidding them all needs no rounding argument).
    if (hit)
      atomicMin(reinterpret_cast<unsigned long long*>(found), static_cast<unsigned long long>(i));
    __syncthreads();
    if (*found < n) break;
    carry += total;
    __syncthreads();
  }
  __syncthreads();
  return *found;
}

__global__ void __launch_bounds__(kThreads) select_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                                          const DrawParams* __restrict__ params,
                                                          const uint64_t* __restrict__ sorted,
                                                          int32_t* __restrict__ ids) {
  __shared__ union {
    typename BlockReduce::TempStorage reduce;
    typename BlockScan::TempStorage scan;
  } smem;
  __shared__ int64_t found;
  __shared__ double shared_sum;
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  const uint64_t* keys = sorted + r * vocab;
  const DrawParams p = params[r];
  if (p.temperature == 0.0f) {  // greedy: the first key
    if (threadIdx.x == 0) ids[r] = int32_t(uint32_t(keys[0]));
    return;
  }
  int64_t keep = vocab;
  if (p.top_k > 0) {
    if (threadIdx.x == 0) {
      int64_t k = p.top_k < keep ? p.top_k : keep;
      const float kth = logit_of(row, keys[k - 1]);
      while (k < keep && logit_of(row, keys[k]) == kth) ++k;  // ties with the k-th are kept
      found = k;
    }
    __syncthreads();
    keep = found;
    __syncthreads();
  }
  const double inv_t = 1.0 / double(p.temperature);
  const double top = double(logit_of(row, keys[0])) * inv_t;
  auto weight = [&](int64_t i) { return exp(double(logit_of(row, keys[i])) * inv_t - top); };
  // sum of the kept weights
  double part = 0;
  for (int64_t i = threadIdx.x; i < keep; i += kThreads) part += weight(i);
  const double s = BlockReduce(smem.reduce).Sum(part);
  if (threadIdx.x == 0) shared_sum = s;
  __syncthreads();
  const double sum = shared_sum;
  auto prob = [&](int64_t i) { return weight(i) / sum; };
  if (p.top_p < 1.0f) {
    const int64_t j = first_prefix_reaching(prob, keep, double(p.top_p), true, &smem.scan, &found);
    keep = j < keep ? j + 1 : keep;  // the prefix up to and including the one that reached top_p
  }
  if (p.min_p > 0.0f) {
    // Probabilities fall along the sorted order, so the survivors are a
    // prefix: the first one below the floor ends it (at least one stays).
    const double floor = double(p.min_p) * prob(0);
    __syncthreads();  // every thread has read found's previous value
    if (threadIdx.x == 0) found = keep;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < keep; i += kThreads)
      if (prob(i) < floor) atomicMin(reinterpret_cast<unsigned long long*>(&found), static_cast<unsigned long long>(i));
    __syncthreads();
    keep = found > 1 ? found : 1;
    __syncthreads();
  }
  // Renormalise over the survivors and draw.
  part = 0;
  for (int64_t i = threadIdx.x; i < keep; i += kThreads) part += prob(i);
  const double s2 = BlockReduce(smem.reduce).Sum(part);
  if (threadIdx.x == 0) shared_sum = s2;
  __syncthreads();
  const double sum2 = shared_sum;
  __syncthreads();
  auto final_prob = [&](int64_t i) { return prob(i) / sum2; };
  const int64_t pick = first_prefix_reaching(final_prob, keep, p.u, false, &smem.scan, &found);
  if (threadIdx.x == 0) ids[r] = int32_t(uint32_t(keys[pick < keep ? pick : keep - 1]));
}

}  // namespace

size_t cuda_sample_workspace_bytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return 2 * align256(size_t(rows * vocab) * 8) + align256(size_t(rows + 1) * 8) + align256(sort_temp_bytes(rows, vocab));
}

void cuda_sample(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DrawParams* params,
                 void* workspace, size_t workspace_bytes, int32_t* ids, void* stream) {
  if (vocab <= 0 || vocab > (int64_t(1) << 32) || ld < vocab)
    fail("cuda_sample: ", vocab, " logits in rows of ", ld);
  if (rows <= 0) return;
  if (workspace_bytes < cuda_sample_workspace_bytes(rows, vocab))
    fail("cuda_sample: workspace of ", workspace_bytes, " bytes, needs ", cuda_sample_workspace_bytes(rows, vocab));
  const Scratch s = carve(workspace, rows, vocab);
  const auto st = static_cast<cudaStream_t>(stream);
  const int64_t total = std::max(rows * vocab, rows + 1);
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
  // offsets are written by the first rows + 1 threads: at least that many launched.
  keys_kernel<<<std::max<unsigned>(blocks, unsigned((rows + 256) / 256)), 256, 0, st>>>(logits, rows, vocab, ld, s.keys,
                                                                                        s.offsets);
  check(cudaGetLastError(), "keys launch");
  size_t temp = s.temp_bytes;
  check(cub::DeviceSegmentedRadixSort::SortKeys(s.temp, temp, static_cast<const uint64_t*>(s.keys), s.sorted,
                                                rows * vocab, rows, static_cast<const int64_t*>(s.offsets),
                                                static_cast<const int64_t*>(s.offsets + 1), 0, 64, st),
        "segmented sort");
  select_kernel<<<unsigned(rows), kThreads, 0, st>>>(logits, vocab, ld, params, s.sorted, ids);
  check(cudaGetLastError(), "select launch");
}

std::vector<int32_t> cuda_sample_host(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                      const std::vector<DrawParams>& params) {
  if (int64_t(logits.size()) != rows * vocab || int64_t(params.size()) != rows)
    fail("cuda_sample_host: logits must be [", rows, ", ", vocab, "] and params [", rows, "]");
  for (const DrawParams& p : params)
    if (!(p.temperature >= 0) || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1) || !(p.min_p >= 0 && p.min_p <= 1) ||
        !(p.u >= 0 && p.u < 1))
      fail("cuda_sample_host: parameters out of range (temperature ", p.temperature, ", top_k ", p.top_k, ", top_p ",
           p.top_p, ", min_p ", p.min_p, ", u ", p.u, ")");
  const size_t ws = cuda_sample_workspace_bytes(rows, vocab);
  DeviceBuffer<float> dl(logits.size(), logits.data());
  DeviceBuffer<DrawParams> dp(params.size(), params.data());
  DeviceBuffer<uint8_t> dw(ws);
  DeviceBuffer<int32_t> di(static_cast<size_t>(rows));
  cuda_sample(dl.p, rows, vocab, vocab, dp.p, dw.p, ws, di.p);
  return di.download(size_t(rows));
}

}  // namespace nibble
