// The attention state kernels (attention_state.h): small, one thread per
// element or per token; a decode step moves a few rows through them.
#include "kernels/cuda/attention_state.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/device_buffer.cuh"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"attention_state"};
constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

__global__ void ring_store_kernel(float* ring, int64_t ring_rows, int64_t width, const float* src, int64_t n,
                                  int64_t p0, int64_t t_from, const float* bias, int64_t bias_period) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = t_from + i / width, c = i % width;
  if (t >= n) return;
  const int64_t p = p0 + t;
  float v = src[t * width + c];
  if (bias) v += bias[(p % bias_period) * width + c];
  ring[(p % ring_rows) * width + c] = v;
}

__global__ void ring_load_kernel(const float* ring, int64_t ring_rows, int64_t width, int64_t p_from, int64_t count,
                                 float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t j = i / width, c = i % width;
  if (j >= count) return;
  out[j * width + c] = ring[((p_from + j) % ring_rows) * width + c];
}

// One (window, channel): the CPU's emit_entry for that channel.
__global__ void compressor_pool_kernel(const float* kv_rows, const float* score_rows, int64_t ring_rows,
                                       int64_t width, int64_t dim, int64_t ratio, bool overlap, int64_t w0,
                                       int64_t count, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t k = i / dim, ch = i % dim;
  if (k >= count) return;
  const int64_t w = w0 + k, m = ratio;
  const int64_t n_prev = overlap && w > 0 ? m : 0;
  const int64_t cur_off = overlap ? dim : 0;
  // Slot j < n_prev: position (w - 1) m + j, channel ch (Ca); else position
  // w m + j - n_prev, channel cur_off + ch.
  auto at = [&](const float* rows, int64_t j) {
    const int64_t p = j < n_prev ? (w - 1) * m + j : w * m + (j - n_prev);
    const int64_t c = j < n_prev ? ch : cur_off + ch;
    return rows[(p % ring_rows) * width + c];
  };
  const int64_t slots = n_prev + m;
  float mx = at(score_rows, 0);
  for (int64_t j = 1; j < slots; ++j) mx = fmaxf(mx, at(score_rows, j));
  double sum = 0;
  for (int64_t j = 0; j < slots; ++j) sum += double(expf(at(score_rows, j) - mx));
  const float inv = float(1.0 / sum);
  float acc = 0;
  for (int64_t j = 0; j < slots; ++j) acc += at(kv_rows, j) * (expf(at(score_rows, j) - mx) * inv);
  out[k * dim + ch] = acc;
}

__global__ void key_lists_kernel(int64_t n, int64_t p0, int64_t first, int64_t window, int mode, int64_t ratio,
                                 int64_t n_entries, const int32_t* selected, const int32_t* selected_counts,
                                 int64_t topk, int64_t max_keys, int32_t* keys, int32_t* counts) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const int64_t pos = p0 + t;
  int32_t* k = keys + t * max_keys;
  int64_t c = 0;
  for (int64_t p = max(first, pos - window + 1); p <= pos && c < max_keys; ++p) k[c++] = int32_t(p - first);
  if (mode == 1) {
    const int64_t visible = min((pos + 1) / ratio, n_entries);
    for (int64_t e = 0; e < visible && c < max_keys; ++e) k[c++] = int32_t(-1 - e);
  } else if (mode == 2) {
    for (int64_t j = 0; j < selected_counts[t] && c < max_keys; ++j) k[c++] = -1 - selected[t * topk + j];
  }
  counts[t] = int32_t(c);
}

}  // namespace

void cuda_ring_store(float* ring, int64_t ring_rows, int64_t width, const float* src, int64_t n, int64_t p0,
                     int64_t t_from, const float* bias, int64_t bias_period, void* stream) {
  if (ring_rows <= 0 || width <= 0 || p0 < 0 || t_from < 0 || (bias && bias_period <= 0))
    fail("ring_store: ", ring_rows, " rows of ", width, " at position ", p0, " from row ", t_from);
  if (n - t_from > ring_rows)
    fail("ring_store: ", n - t_from, " rows would overwrite each other in a ring of ", ring_rows);
  if (n <= t_from) return;
  ring_store_kernel<<<blocks_for((n - t_from) * width), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      ring, ring_rows, width, src, n, p0, t_from, bias, bias_period);
  check(cudaGetLastError(), "ring_store launch");
}

void cuda_ring_load(const float* ring, int64_t ring_rows, int64_t width, int64_t p_from, int64_t count, float* out,
                    void* stream) {
  if (ring_rows <= 0 || width <= 0 || p_from < 0 || count > ring_rows)
    fail("ring_load: ", count, " rows from position ", p_from, " of a ring of ", ring_rows, " rows of ", width);
  if (count <= 0) return;
  ring_load_kernel<<<blocks_for(count * width), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      ring, ring_rows, width, p_from, count, out);
  check(cudaGetLastError(), "ring_load launch");
}

void cuda_compressor_pool(const float* kv_rows, const float* score_rows, int64_t ring_rows, int64_t width,
                          int64_t dim, int64_t ratio, bool overlap, int64_t w0, int64_t count, float* out,
                          void* stream) {
  if (ratio <= 0 || dim <= 0 || width != (overlap ? 2 * dim : dim) || w0 < 0 ||
      ring_rows < (overlap ? 2 : 1) * ratio)
    fail("compressor_pool: ratio ", ratio, ", width ", width, " for entries of ", dim, ", a ring of ", ring_rows,
         " rows");
  if (count <= 0) return;
  compressor_pool_kernel<<<blocks_for(count * dim), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      kv_rows, score_rows, ring_rows, width, dim, ratio, overlap, w0, count, out);
  check(cudaGetLastError(), "compressor_pool launch");
}

void cuda_attention_key_lists(int64_t n, int64_t p0, int64_t first, int64_t window, int mode, int64_t ratio,
                              int64_t n_entries, const int32_t* selected, const int32_t* selected_counts,
                              int64_t topk, int64_t max_keys, int32_t* keys, int32_t* counts, void* stream) {
  if (window <= 0 || mode < 0 || mode > 2 || (mode == 1 && ratio <= 0) || (mode == 2 && (!selected || topk <= 0)) ||
      max_keys <= 0 || first < 0 || first > p0)
    fail("attention_key_lists: window ", window, ", mode ", mode, ", ratio ", ratio, ", top-k ", topk, ", ",
         max_keys, " keys at most, first ", first, " for position ", p0);
  if (n <= 0) return;
  key_lists_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      n, p0, first, window, mode, ratio, n_entries, selected, selected_counts, topk, max_keys, keys, counts);
  check(cudaGetLastError(), "attention_key_lists launch");
}

std::vector<float> cuda_ring_store_host(std::vector<float> ring, int64_t width, const std::vector<float>& src,
                                        int64_t p0, int64_t t_from, const std::vector<float>& bias,
                                        int64_t bias_period) {
  if (width <= 0 || ring.size() % size_t(width) || src.size() % size_t(width))
    fail("cuda_ring_store_host: the ring and the rows must be whole rows of ", width);
  DeviceBuffer<float> dr(ring.size(), ring.data()), ds(src.size(), src.data()), db(bias.size(), bias.data());
  cuda_ring_store(dr.p, int64_t(ring.size()) / width, width, ds.p, int64_t(src.size()) / width, p0, t_from,
                  bias.empty() ? nullptr : db.p, bias_period, nullptr);
  return dr.download(ring.size());
}

std::vector<float> cuda_compressor_pool_host(const std::vector<float>& kv_rows, const std::vector<float>& score_rows,
                                             int64_t width, int64_t dim, int64_t ratio, bool overlap, int64_t w0,
                                             int64_t count) {
  if (width <= 0 || kv_rows.size() != score_rows.size() || kv_rows.size() % size_t(width))
    fail("cuda_compressor_pool_host: two rings of whole rows of ", width, " expected");
  DeviceBuffer<float> dk(kv_rows.size(), kv_rows.data()), ds(score_rows.size(), score_rows.data()),
      dout(size_t(std::max<int64_t>(count, 0) * dim));
  cuda_compressor_pool(dk.p, ds.p, int64_t(kv_rows.size()) / width, width, dim, ratio, overlap, w0, count, dout.p,
                       nullptr);
  return dout.download(size_t(count * dim));
}

KeyListsHost cuda_attention_key_lists_host(int64_t n, int64_t p0, int64_t first, int64_t window, int mode,
                                           int64_t ratio, int64_t n_entries, const std::vector<int32_t>& selected,
                                           const std::vector<int32_t>& selected_counts, int64_t topk,
                                           int64_t max_keys) {
  DeviceBuffer<int32_t> ds(selected.size(), selected.data()), dc(selected_counts.size(), selected_counts.data()),
      dk(size_t(n * max_keys)), dn(static_cast<size_t>(n));
  cuda_attention_key_lists(n, p0, first, window, mode, ratio, n_entries, mode == 2 ? ds.p : nullptr, dc.p, topk,
                           max_keys, dk.p, dn.p, nullptr);
  return KeyListsHost{dk.download(size_t(n * max_keys)), dn.download(size_t(n))};
}

}  // namespace nibble
