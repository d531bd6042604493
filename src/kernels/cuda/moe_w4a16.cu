// Launching the W4A16 grouped expert GEMM, and its host round trip for tests
// and benchmarks.
#include "kernels/cuda/moe_w4a16.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/moe_w4a16.cuh"
#include "util/error.h"

namespace nibble {

using namespace w4a16;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("moe_w4a16: ", what, ": ", cudaGetErrorString(e));
}

// Device buffer freed on scope exit (the host round trip's only state).
template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n, const T* host = nullptr) {
    check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    if (host && n) check(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

void moe_w4a16_launch(const W4A16ExpertsDevice& w, const MoeGemmArgs& a) {
  if (w.format != Format::mxfp4 && w.format != Format::nvfp4)
    fail("moe_w4a16: weights must be MXFP4 or NVFP4, not ", format_name(w.format));
  if (w.rows_padded % kTileRows || w.cols_padded % kChunkK || w.rows > w.rows_padded || w.cols > w.cols_padded ||
      w.experts <= 0 || w.rows <= 0)
    fail("moe_w4a16: bad layout [", w.rows, ", ", w.cols, "] padded [", w.rows_padded, ", ", w.cols_padded, "] x ",
         w.experts, " experts");
  if (a.k_splits < 1 || a.k_splits > w.cols_padded / kChunkK)
    fail("moe_w4a16: k_splits ", a.k_splits, " must be in 1..", w.cols_padded / kChunkK);
  if (a.n_assign == 0) return;
  const int group = w.format == Format::mxfp4 ? 32 : 16;
  KernelParams p;
  p.words = reinterpret_cast<const uint4*>(w.words);
  p.scales = w.scales;
  p.global_scales = w.format == Format::nvfp4 ? w.global_scales : nullptr;
  p.words_per_expert = w.rows_padded * w.cols_padded / 8;
  p.scales_per_expert = w.rows_padded * w.cols_padded / group;
  p.x = a.x;
  p.ldx = w.cols_padded;
  p.offsets = a.offsets;
  p.x_rows = a.x_rows;
  p.y = a.y;
  p.rows = int(w.rows);
  p.strips = int(w.rows_padded / kTileRows);
  p.n_chunks = int(w.cols_padded / kChunkK);
  p.experts = int(w.experts);
  p.k_splits = a.k_splits;
  auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.k_splits > 1)  // the splits add into y
    check(cudaMemsetAsync(a.y, 0, size_t(a.n_assign) * size_t(w.rows) * sizeof(float), stream), "cudaMemsetAsync");
  const int64_t warps = w.experts * p.strips;
  const dim3 grid(unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(a.k_splits));
  const int passes = moe_w4a16_tokens_per_pass(a.max_per_expert) / kTokensPerMma;
  if (w.format == Format::mxfp4) launch_mxfp4(p, passes, grid, stream);
  else launch_nvfp4(p, passes, grid, stream);
  check(cudaGetLastError(), "kernel launch");
}

MoeGemmHostResult moe_w4a16_run_host(const std::vector<W4A16Matrix>& experts, const std::vector<uint16_t>& x_bf16,
                                     const std::vector<int32_t>& offsets, const std::vector<int32_t>& x_rows,
                                     int k_splits, int iters) {
  if (experts.empty()) fail("moe_w4a16: no experts");
  const W4A16Matrix& e0 = experts.front();
  for (const auto& e : experts)
    if (e.format != e0.format || e.rows != e0.rows || e.cols != e0.cols)
      fail("moe_w4a16: experts differ in format or shape");
  if (offsets.size() != experts.size() + 1 || offsets.front() != 0 || size_t(offsets.back()) != x_rows.size())
    fail("moe_w4a16: offsets must have experts + 1 entries from 0 to the number of assignments");
  const int64_t n_x = int64_t(x_bf16.size()) / e0.cols_padded;
  if (int64_t(x_bf16.size()) != n_x * e0.cols_padded) fail("moe_w4a16: x is not [n, cols_padded]");
  int64_t max_per_expert = 0;
  MoeGemmHostResult r;
  for (size_t e = 0; e < experts.size(); ++e) {
    if (offsets[e + 1] < offsets[e]) fail("moe_w4a16: offsets decrease at expert ", e);
    max_per_expert = std::max<int64_t>(max_per_expert, offsets[e + 1] - offsets[e]);
    if (offsets[e + 1] > offsets[e]) r.weight_bytes_read += experts[e].bytes();
  }
  for (int32_t row : x_rows)
    if (row < 0 || row >= n_x) fail("moe_w4a16: x row ", row, " outside 0..", n_x - 1);

  std::vector<uint32_t> words;
  std::vector<uint8_t> scales;
  std::vector<float> gs;
  for (const auto& e : experts) {
    words.insert(words.end(), e.words.begin(), e.words.end());
    scales.insert(scales.end(), e.scales.begin(), e.scales.end());
    gs.push_back(e.global_scale);
  }
  DeviceBuffer<uint32_t> d_words(words.size(), words.data());
  DeviceBuffer<uint8_t> d_scales(scales.size(), scales.data());
  DeviceBuffer<float> d_gs(gs.size(), gs.data());
  DeviceBuffer<uint16_t> d_x(x_bf16.size(), x_bf16.data());
  DeviceBuffer<int32_t> d_off(offsets.size(), offsets.data());
  DeviceBuffer<int32_t> d_rows(x_rows.size(), x_rows.data());
  const size_t ny = x_rows.size() * size_t(e0.rows);
  DeviceBuffer<float> d_y(ny);

  W4A16ExpertsDevice w{e0.format, int64_t(experts.size()), e0.rows, e0.cols, e0.rows_padded, e0.cols_padded,
                       d_words.p, d_scales.p, d_gs.p};
  MoeGemmArgs a;
  a.x = d_x.p;
  a.offsets = d_off.p;
  a.x_rows = d_rows.p;
  a.y = d_y.p;
  a.n_assign = int64_t(x_rows.size());
  a.max_per_expert = max_per_expert;
  a.k_splits = k_splits;
  if (iters > 1) moe_w4a16_launch(w, a);  // warm-up
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  check(cudaEventRecord(t0), "cudaEventRecord");
  for (int i = 0; i < std::max(iters, 1); ++i) moe_w4a16_launch(w, a);
  check(cudaEventRecord(t1), "cudaEventRecord");
  check(cudaEventSynchronize(t1), "kernel");
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  r.seconds_per_call = double(ms) * 1e-3 / std::max(iters, 1);
  r.y.resize(ny);
  check(cudaMemcpy(r.y.data(), d_y.p, ny * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  return r;
}

}  // namespace nibble
