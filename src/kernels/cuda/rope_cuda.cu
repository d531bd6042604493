// The interleaved RoPE kernel: one thread per (row, head, pair).
#include "kernels/cuda/rope_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"rope"};

__global__ void rope_kernel(const float* __restrict__ inv_freq, int64_t half, float af, float* __restrict__ x,
                            int64_t n, int64_t heads, int64_t width, const int64_t* __restrict__ positions,
                            float sign) {
  const int64_t total = n * heads * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i % half, v = i / half;  // v = row * heads + head
    const int64_t row = v / heads;
    // The angle as RopeTable::angles: an f32 product of f32(pos) and the
    // frequency, then cos / sin times the attention factor.
    const float a = float(positions[row]) * inv_freq[p];
    const float c = cosf(a) * af, s = sinf(a) * af * sign;
    float* r = x + v * width + (width - 2 * half) + 2 * p;
    const float x0 = r[0], x1 = r[1];
    r[0] = x0 * c + (-x1) * s;
    r[1] = x1 * c + x0 * s;
  }
}

}  // namespace

void cuda_rope(const float* inv_freq, int64_t rope_dim, float attention_factor, float* x, int64_t n, int64_t heads,
               int64_t width, const int64_t* positions, bool inverse, void* stream) {
  if (rope_dim <= 0 || rope_dim % 2 || rope_dim > width || heads <= 0)
    fail("cuda_rope: rope_dim ", rope_dim, " must be even and fit vectors of ", width, " (", heads, " heads)");
  const int64_t total = n * heads * (rope_dim / 2);
  if (total <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 8192));
  rope_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(inv_freq, rope_dim / 2, attention_factor, x, n,
                                                                     heads, width, positions, inverse ? -1.0f : 1.0f);
  check(cudaGetLastError(), "kernel launch");
}

std::vector<float> cuda_rope_host(const std::vector<float>& inv_freq, float attention_factor, std::vector<float> x,
                                  int64_t heads, int64_t width, const std::vector<int64_t>& positions, bool inverse) {
  const int64_t n = int64_t(positions.size());
  if (int64_t(x.size()) != n * heads * width)
    fail("cuda_rope_host: x must be [", n, ", ", heads, " x ", width, "]");
  DeviceBuffer<float> df(inv_freq.size(), inv_freq.data()), dx(x.size(), x.data());
  DeviceBuffer<int64_t> dp(positions.size(), positions.data());
  cuda_rope(df.p, 2 * int64_t(inv_freq.size()), attention_factor, dx.p, n, heads, width, dp.p, inverse);
  return dx.download(x.size());
}

}  // namespace nibble
