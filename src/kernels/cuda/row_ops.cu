// The row-wise ops' kernels: grid-stride loops for the elementwise ones, one
// block per row for RMSNorm, one warp per output for the F32 linear.
#include "kernels/cuda/row_ops.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "format/format.h"
#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"row_ops"};

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

unsigned blocks_for(int64_t total, int threads = 256) {
  return unsigned(std::clamp<int64_t>((total + threads - 1) / threads, 1, 8192));
}

// Block-wide sum of one float per thread (blockDim.x a multiple of 32, <= 1024).
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) red[w] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? red[threadIdx.x] : 0.0f;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) red[0] = v;
  __syncthreads();
  const float total = red[0];
  __syncthreads();  // red is reused by the caller's next reduction
  return total;
}

__global__ void rms_norm_kernel(const float* x, int64_t dim, const float* __restrict__ weight, float eps,
                                float* y) {
  __shared__ float red[32];
  const float* xr = x + int64_t(blockIdx.x) * dim;
  float* yr = y + int64_t(blockIdx.x) * dim;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  // As the CPU backend (HF): r = 1 / sqrt(mean + eps), then (x * r) * weight.
  const float r = 1.0f / sqrtf(ss / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = xr[i] * r;
    yr[i] = weight ? weight[i] * v : v;
  }
}

__global__ void add_to_streams_kernel(const float* __restrict__ x, int64_t n, int64_t cols, int64_t copies,
                                      float* __restrict__ streams) {
  const int64_t width = cols * copies, total = n * width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    streams[i] += x[t * cols + c % cols];
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t cols, const int64_t* __restrict__ rows,
                                   int64_t n_rows, float* __restrict__ out) {
  const int64_t total = n_rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = x[rows[r] * cols + c];
  }
}

__global__ void copy_cols_kernel(const float* __restrict__ src, int64_t src_ld, int64_t src_c0, float* __restrict__ dst,
                                 int64_t dst_ld, int64_t dst_c0, int64_t n, int64_t cols) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * dst_ld + dst_c0 + c] = src[r * src_ld + src_c0 + c];
  }
}

__global__ void add_bias_kernel(float* __restrict__ y, int64_t n, int64_t cols, const float* __restrict__ bias) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

__device__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// One block per token; `is_bf16` picks the table's element type.
__global__ void embed_kernel(const void* __restrict__ table, int is_bf16, int64_t vocab, int64_t dim,
                             const int32_t* __restrict__ ids, int64_t copies, float* __restrict__ out,
                             int32_t* error) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float* o = out + t * copies * dim;
  const bool ok = id >= 0 && int64_t(id) < vocab;
  if (!ok && threadIdx.x == 0) atomicCAS(error, 0, int32_t(t + 1));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = 0;
    if (ok)
      v = is_bf16 ? bf16_bits_to_float(static_cast<const uint16_t*>(table)[int64_t(id) * dim + i])
                  : static_cast<const float*>(table)[int64_t(id) * dim + i];
    for (int64_t k = 0; k < copies; ++k) o[k * dim + i] = v;
  }
}

// Warp w of the grid computes output (t, r) = divmod(w, rows).
__global__ void linear_f32_kernel(const float* __restrict__ w, int64_t rows, int64_t cols,
                                  const float* __restrict__ x, int64_t n, float* __restrict__ y) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= n * rows) return;  // whole warps leave together: rows * n is counted in warps
  const int64_t t = warp / rows, r = warp % rows;
  const float* wr = w + r * cols;
  const float* xt = x + t * cols;
  float acc = 0;
  for (int64_t c = lane; c < cols; c += 32) acc += wr[c] * xt[c];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[t * rows + r] = acc;
}

}  // namespace

void cuda_rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, float eps, float* y, void* stream) {
  if (dim <= 0) fail("cuda_rms_norm: a row of ", dim, " values");
  if (n <= 0) return;
  if (n > 0x7fffffff) fail("cuda_rms_norm: ", n, " rows exceed one grid");
  rms_norm_kernel<<<unsigned(n), 256, 0, as_stream(stream)>>>(x, dim, weight, eps, y);
  check(cudaGetLastError(), "rms_norm launch");
}

void cuda_add_to_streams(const float* x, int64_t n, int64_t cols, int64_t copies, float* streams, void* stream) {
  if (cols <= 0 || copies <= 0) fail("cuda_add_to_streams: [", n, ", ", cols, "] over ", copies, " copies");
  if (n <= 0) return;
  add_to_streams_kernel<<<blocks_for(n * cols * copies), 256, 0, as_stream(stream)>>>(x, n, cols, copies, streams);
  check(cudaGetLastError(), "add_to_streams launch");
}

void cuda_gather_rows(const float* x, int64_t cols, const int64_t* rows, int64_t n_rows, float* out, void* stream) {
  if (n_rows <= 0 || cols <= 0) return;
  gather_rows_kernel<<<blocks_for(n_rows * cols), 256, 0, as_stream(stream)>>>(x, cols, rows, n_rows, out);
  check(cudaGetLastError(), "gather_rows launch");
}

void cuda_copy_cols(const float* src, int64_t src_ld, int64_t src_c0, float* dst, int64_t dst_ld, int64_t dst_c0,
                    int64_t n, int64_t cols, void* stream) {
  if (src_c0 < 0 || dst_c0 < 0 || cols < 0 || src_c0 + cols > src_ld || dst_c0 + cols > dst_ld)
    fail("cuda_copy_cols: columns [", src_c0, ", ", src_c0 + cols, ") of rows of ", src_ld, " to [", dst_c0, ", ",
         dst_c0 + cols, ") of rows of ", dst_ld);
  if (n <= 0 || cols == 0) return;
  copy_cols_kernel<<<blocks_for(n * cols), 256, 0, as_stream(stream)>>>(src, src_ld, src_c0, dst, dst_ld, dst_c0, n,
                                                                       cols);
  check(cudaGetLastError(), "copy_cols launch");
}

void cuda_add_bias(float* y, int64_t n, int64_t cols, const float* bias, void* stream) {
  if (n <= 0 || cols <= 0) return;
  add_bias_kernel<<<blocks_for(n * cols), 256, 0, as_stream(stream)>>>(y, n, cols, bias);
  check(cudaGetLastError(), "add_bias launch");
}

void cuda_embed(const void* table, Format format, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n,
                int64_t copies, float* out, int32_t* error, void* stream) {
  if (format != Format::f32 && format != Format::bf16)
    fail("cuda_embed: the embedding table is ", format_name(format), "; the GPU embeds F32 or BF16 tables");
  if (dim <= 0 || copies <= 0) fail("cuda_embed: rows of ", dim, " values, ", copies, " copies");
  if (!error) fail("cuda_embed: needs the error flag (a bad id must not pass silently)");
  if (n <= 0) return;
  embed_kernel<<<unsigned(n), 256, 0, as_stream(stream)>>>(table, format == Format::bf16, vocab, dim, ids, copies,
                                                           out, error);
  check(cudaGetLastError(), "embed launch");
}

void cuda_linear_f32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, void* stream) {
  if (rows <= 0 || cols <= 0) fail("cuda_linear_f32: a [", rows, ", ", cols, "] weight");
  if (n <= 0) return;
  const int64_t threads = n * rows * 32;
  linear_f32_kernel<<<unsigned((threads + 255) / 256), 256, 0, as_stream(stream)>>>(w, rows, cols, x, n, y);
  check(cudaGetLastError(), "linear_f32 launch");
}

// ---- host round trips ----

std::vector<float> cuda_rms_norm_host(const std::vector<float>& x, int64_t n, int64_t dim,
                                      const std::vector<float>& weight, float eps) {
  if (int64_t(x.size()) != n * dim || (!weight.empty() && int64_t(weight.size()) != dim))
    fail("cuda_rms_norm_host: x must be [", n, ", ", dim, "] and weight empty or [", dim, "]");
  DeviceBuffer<float> dx(x.size(), x.data()), dw(weight.size(), weight.data()), dy(x.size());
  cuda_rms_norm(dx.p, n, dim, weight.empty() ? nullptr : dw.p, eps, dy.p);
  return dy.download(x.size());
}

std::vector<float> cuda_add_to_streams_host(const std::vector<float>& x, int64_t n, int64_t cols, int64_t copies,
                                            std::vector<float> streams) {
  if (int64_t(x.size()) != n * cols || int64_t(streams.size()) != n * cols * copies)
    fail("cuda_add_to_streams_host: x must be [", n, ", ", cols, "] and streams [", n, ", ", cols * copies, "]");
  DeviceBuffer<float> dx(x.size(), x.data()), ds(streams.size(), streams.data());
  cuda_add_to_streams(dx.p, n, cols, copies, ds.p);
  return ds.download(streams.size());
}

std::vector<float> cuda_gather_rows_host(const std::vector<float>& x, int64_t cols, const std::vector<int64_t>& rows) {
  const int64_t n = cols > 0 ? int64_t(x.size()) / cols : 0;
  for (int64_t r : rows)
    if (r < 0 || r >= n) fail("cuda_gather_rows_host: row ", r, " outside [0, ", n, ")");
  DeviceBuffer<float> dx(x.size(), x.data()), dout(rows.size() * size_t(cols));
  DeviceBuffer<int64_t> dr(rows.size(), rows.data());
  cuda_gather_rows(dx.p, cols, dr.p, int64_t(rows.size()), dout.p);
  return dout.download(rows.size() * size_t(cols));
}

std::vector<float> cuda_copy_cols_host(const std::vector<float>& src, int64_t src_ld, int64_t src_c0,
                                       std::vector<float> dst, int64_t dst_ld, int64_t dst_c0, int64_t n, int64_t cols) {
  if (int64_t(src.size()) != n * src_ld || int64_t(dst.size()) != n * dst_ld)
    fail("cuda_copy_cols_host: src must be [", n, ", ", src_ld, "] and dst [", n, ", ", dst_ld, "]");
  if (src_c0 < 0 || dst_c0 < 0 || cols < 0 || src_c0 + cols > src_ld || dst_c0 + cols > dst_ld)
    fail("cuda_copy_cols_host: the column block does not fit");
  DeviceBuffer<float> ds(src.size(), src.data()), dd(dst.size(), dst.data());
  cuda_copy_cols(ds.p, src_ld, src_c0, dd.p, dst_ld, dst_c0, n, cols);
  return dd.download(dst.size());
}

std::vector<float> cuda_add_bias_host(std::vector<float> y, int64_t n, int64_t cols, const std::vector<float>& bias) {
  if (int64_t(y.size()) != n * cols || int64_t(bias.size()) != cols)
    fail("cuda_add_bias_host: y must be [", n, ", ", cols, "] and bias [", cols, "]");
  DeviceBuffer<float> dy(y.size(), y.data()), db(bias.size(), bias.data());
  cuda_add_bias(dy.p, n, cols, db.p);
  return dy.download(y.size());
}

std::vector<float> cuda_embed_host(const WeightView& table, const std::vector<int32_t>& ids, int64_t copies) {
  const size_t elem = table.format == Format::bf16 ? 2 : 4;
  const size_t bytes = size_t(table.rows * table.cols) * elem;
  DeviceBuffer<uint8_t> dt(bytes, table.data);
  DeviceBuffer<int32_t> di(ids.size(), ids.data()), derr(1);
  const size_t n_out = ids.size() * size_t(copies * table.cols);
  DeviceBuffer<float> dout(n_out);
  cuda_embed(dt.p, table.format, table.rows, table.cols, di.p, int64_t(ids.size()), copies, dout.p, derr.p);
  const int32_t err = derr.download(1)[0];
  if (err) fail("embed ", table.name, ": token ", err - 1, " has id ", ids[size_t(err - 1)], ", outside the vocabulary [0, ",
                table.rows, ")");
  return dout.download(n_out);
}

std::vector<float> cuda_linear_f32_host(const std::vector<float>& w, int64_t rows, int64_t cols,
                                        const std::vector<float>& x, int64_t n) {
  if (int64_t(w.size()) != rows * cols || int64_t(x.size()) != n * cols)
    fail("cuda_linear_f32_host: w must be [", rows, ", ", cols, "] and x [", n, ", ", cols, "]");
  DeviceBuffer<float> dw(w.size(), w.data()), dx(x.size(), x.data()), dy(size_t(n * rows));
  cuda_linear_f32(dw.p, rows, cols, dx.p, n, dy.p);
  return dy.download(size_t(n * rows));
}

}  // namespace nibble
