// The clamped SwiGLU step (swiglu.h), with the arithmetic of the fused one in
// moe_w4a16.cuh (same helpers, so both round alike).
#include "kernels/cuda/swiglu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "device/cuda_check.cuh"
#include "kernels/cuda/moe_w4a16.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"swiglu"};

__global__ void swiglu_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n, int64_t inter,
                              int64_t ld, float limit, uint16_t* __restrict__ h) {
  const int64_t total = n * ld;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / ld, c = i % ld;
    h[i] = c < inter ? w4a16::to_bf16_bits(w4a16::swiglu(g[t * inter + c], u[t * inter + c], limit)) : uint16_t(0);
  }
}

}  // namespace

void swiglu_bf16_launch(const float* g, const float* u, int64_t n, int64_t inter, int64_t ld, float limit,
                        uint16_t* h, void* stream) {
  if (inter <= 0 || ld < inter) fail("swiglu: a row of ", ld, " cannot hold ", inter, " values");
  if (n <= 0) return;
  const int64_t total = n * ld;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
  swiglu_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(g, u, n, inter, ld, limit, h);
  check(cudaGetLastError(), "kernel launch");
}

std::vector<float> swiglu_bf16_run_host(const std::vector<float>& g, const std::vector<float>& u, int64_t n,
                                        int64_t inter, int64_t ld, float limit) {
  if (int64_t(g.size()) != n * inter || u.size() != g.size())
    fail("swiglu: g and u must both be [", n, ", ", inter, "]");
  float *dg = nullptr, *du = nullptr;
  uint16_t* dh = nullptr;
  const size_t nh = size_t(std::max<int64_t>(n * ld, 1));
  check(cudaMalloc(&dg, std::max<size_t>(g.size(), 1) * 4), "cudaMalloc");
  check(cudaMalloc(&du, std::max<size_t>(u.size(), 1) * 4), "cudaMalloc");
  check(cudaMalloc(&dh, nh * 2), "cudaMalloc");
  check(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(du, u.data(), u.size() * 4, cudaMemcpyHostToDevice), "upload");
  swiglu_bf16_launch(dg, du, n, inter, ld, limit, dh);
  std::vector<uint16_t> h(nh);
  check(cudaMemcpy(h.data(), dh, nh * 2, cudaMemcpyDeviceToHost), "download");
  cudaFree(dg);
  cudaFree(du);
  cudaFree(dh);
  std::vector<float> out(nh);
  for (size_t i = 0; i < nh; ++i) {
    const uint32_t bits = uint32_t(h[i]) << 16;
    std::memcpy(&out[i], &bits, 4);
  }
  out.resize(size_t(n * ld));
  return out;
}

}  // namespace nibble
