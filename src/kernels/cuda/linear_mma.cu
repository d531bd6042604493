// Launching the tensor-core linear kernels, the activation rounding to BF16,
// and the host round trip for tests and benchmarks.
#include "kernels/cuda/linear_mma.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/linear_mma.cuh"
#include "util/error.h"

namespace nibble {

using namespace mma;

namespace {

constexpr CudaCheck check{"linear_mma"};

__global__ void to_bf16_kernel(const float* __restrict__ x, int64_t n, int64_t cols, int64_t ld,
                               uint16_t* __restrict__ out) {
  const int64_t total = n * ld;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ld, c = i % ld;
    out[i] = c < cols ? __bfloat16_as_ushort(__float2bfloat16_rn(x[r * cols + c])) : uint16_t(0);
  }
}

}  // namespace

void to_bf16_padded(const float* x, int64_t n, int64_t cols, int64_t ld, uint16_t* out, void* stream) {
  if (cols > ld) fail("to_bf16_padded: ", cols, " columns do not fit a row of ", ld);
  if (n <= 0) return;
  const int64_t total = n * ld;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
  to_bf16_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, n, cols, ld, out);
  check(cudaGetLastError(), "to_bf16 launch");
}

void linear_mma_launch(const MmaWeightsDevice& w, const uint16_t* x, int64_t n, float* y, int k_splits,
                       void* stream) {
  const bool fp8 = w.format == Format::fp8_block128;
  if (!fp8 && w.format != Format::bf16)
    fail("linear_mma: weights must be FP8 block-128 or BF16, not ", format_name(w.format));
  const int ck = chunk_k(fp8);
  if (w.rows <= 0 || w.rows_padded % kTileRows || w.cols_padded % ck || w.rows > w.rows_padded ||
      w.cols > w.cols_padded || (fp8 && (!w.scales || w.col_blocks != (w.cols + kScaleBlock - 1) / kScaleBlock)))
    fail("linear_mma: bad layout [", w.rows, ", ", w.cols, "] padded [", w.rows_padded, ", ", w.cols_padded, "]");
  const int64_t chunks = w.cols_padded / ck;
  if (k_splits < 1 || k_splits > chunks) fail("linear_mma: k_splits ", k_splits, " must be in 1..", chunks);
  if (n <= 0) return;
  if (n > (int64_t(1) << 30)) fail("linear_mma: ", n, " tokens");
  KernelParams p;
  p.words = reinterpret_cast<const uint4*>(w.words);
  p.scales = w.scales;
  p.col_blocks = w.col_blocks;
  p.x = x;
  p.ldx = w.cols_padded;
  p.y = y;
  p.n = int(n);
  p.rows = int(w.rows);
  p.strips = int(w.rows_padded / kTileRows);
  p.n_chunks = int(chunks);
  p.k_splits = k_splits;
  auto s = static_cast<cudaStream_t>(stream);
  if (k_splits > 1) check(cudaMemsetAsync(y, 0, size_t(n) * size_t(w.rows) * sizeof(float), s), "cudaMemsetAsync");
  const dim3 grid(unsigned((p.strips + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(k_splits));
  const int passes = n <= 8 ? 1 : 4;
  if (fp8) launch_fp8(p, passes, grid, s);
  else launch_bf16(p, passes, grid, s);
  check(cudaGetLastError(), "kernel launch");
}

LinearMmaHostResult linear_mma_run_host(const MmaMatrix& m, const std::vector<float>& x, int64_t n, int k_splits,
                                        int iters) {
  if (int64_t(x.size()) != n * m.cols) fail("linear_mma: x has ", x.size(), " values, expected ", n, " x ", m.cols);
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  LinearMmaHostResult r;
  r.k_splits = k_splits > 0 ? k_splits : linear_mma_k_splits(m.rows_padded, m.chunks(), sms);
  DeviceBuffer<uint8_t> d_words(m.words.size(), m.words.data());
  DeviceBuffer<float> d_scales(m.scales.size(), m.scales.data());
  DeviceBuffer<float> d_x32(x.size(), x.data());
  DeviceBuffer<uint16_t> d_x(size_t(n * m.cols_padded));
  DeviceBuffer<float> d_y(size_t(n * m.rows));
  to_bf16_padded(d_x32.p, n, m.cols, m.cols_padded, d_x.p);
  MmaWeightsDevice w = mma_device_shape(m);
  w.words = d_words.p;
  w.scales = m.scales.empty() ? nullptr : d_scales.p;
  if (iters > 1) linear_mma_launch(w, d_x.p, n, d_y.p, r.k_splits);  // warm-up
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  check(cudaEventRecord(t0), "cudaEventRecord");
  for (int i = 0; i < std::max(iters, 1); ++i) linear_mma_launch(w, d_x.p, n, d_y.p, r.k_splits);
  check(cudaEventRecord(t1), "cudaEventRecord");
  check(cudaEventSynchronize(t1), "kernel");
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  r.seconds_per_call = double(ms) * 1e-3 / std::max(iters, 1);
  r.y.resize(size_t(n * m.rows));
  check(cudaMemcpy(r.y.data(), d_y.p, r.y.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  return r;
}

}  // namespace nibble
