// Launching the W4A16 grouped expert GEMM, and its host round trip for tests
// and benchmarks.
#include "kernels/cuda/moe_w4a16.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/moe_w4a16.cuh"
#include "util/error.h"

namespace nibble {

using namespace w4a16;

namespace {

constexpr CudaCheck check{"moe_w4a16"};

}  // namespace

namespace {

void check_layout(const W4A16ExpertsDevice& w, const MoeGemmArgs& a) {
  if (w.format != Format::mxfp4 && w.format != Format::nvfp4 && w.format != Format::int4)
    fail("moe_w4a16: weights must be MXFP4, NVFP4 or INT4, not ", format_name(w.format));
  if (w.rows_padded % kTileRows || w.cols_padded % kChunkK || w.rows > w.rows_padded || w.cols > w.cols_padded ||
      w.experts <= 0 || w.rows <= 0)
    fail("moe_w4a16: bad layout [", w.rows, ", ", w.cols, "] padded [", w.rows_padded, ", ", w.cols_padded, "] x ",
         w.experts, " experts");
  if (a.k_splits < 1 || a.k_splits > w.cols_padded / kChunkK)
    fail("moe_w4a16: k_splits ", a.k_splits, " must be in 1..", w.cols_padded / kChunkK);
}

KernelParams params_for(const W4A16ExpertsDevice& w, const MoeGemmArgs& a) {
  const int group = w.format == Format::nvfp4 ? 16 : 32;
  const int scale_bytes = w.format == Format::int4 ? 2 : 1;  // INT4: BF16 (w4a16_int4.h)
  KernelParams p;
  p.words[0] = reinterpret_cast<const uint4*>(w.words);
  p.scales[0] = w.scales;
  p.global_scales[0] = w.format == Format::nvfp4 ? w.global_scales : nullptr;
  p.words_per_expert = w.rows_padded * w.cols_padded / 8;
  p.scales_per_expert = w.rows_padded * w.cols_padded / group * scale_bytes;
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
  return p;
}

void launch(const W4A16ExpertsDevice& w, const KernelParams& p, const MoeGemmArgs& a, bool gate_up) {
  const int64_t warps = w.experts * p.strips;
  const dim3 grid(unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), unsigned(a.k_splits));
  const int passes = moe_w4a16_tokens_per_pass(a.max_per_expert) / kTokensPerMma;
  auto stream = static_cast<cudaStream_t>(a.stream);
  if (w.format == Format::mxfp4) launch_mxfp4(p, passes, gate_up, grid, stream);
  else if (w.format == Format::int4) launch_int4(p, passes, gate_up, grid, stream);
  else launch_nvfp4(p, passes, gate_up, grid, stream);
  check(cudaGetLastError(), "kernel launch");
}

}  // namespace

void moe_w4a16_launch(const W4A16ExpertsDevice& w, const MoeGemmArgs& a) {
  check_layout(w, a);
  if (a.n_assign == 0) return;
  const KernelParams p = params_for(w, a);
  if (a.k_splits > 1)  // the splits add into y
    check(cudaMemsetAsync(a.y, 0, size_t(a.n_assign) * size_t(w.rows) * sizeof(float),
                          static_cast<cudaStream_t>(a.stream)),
          "cudaMemsetAsync");
  launch(w, p, a, false);
}

void moe_w4a16_gate_up_launch(const W4A16ExpertsDevice& w1, const W4A16ExpertsDevice& w3, const MoeGateUpArgs& g) {
  const MoeGemmArgs& a = g.gemm;
  check_layout(w1, a);
  check_layout(w3, a);
  if (w1.format != w3.format || w1.rows != w3.rows || w1.cols != w3.cols || w1.experts != w3.experts)
    fail("moe_w4a16: gate/up fusion needs w1 and w3 of one format and shape; got ", format_name(w1.format), " [",
         w1.rows, ", ", w1.cols, "] x ", w1.experts, " and ", format_name(w3.format), " [", w3.rows, ", ", w3.cols,
         "] x ", w3.experts);
  if (!g.h || g.ldh < w1.rows) fail("moe_w4a16: gate/up output h needs ldh >= ", w1.rows, " (got ", g.ldh, ")");
  if (a.k_splits > 1 && (!g.scratch_g || !g.scratch_u || !g.tickets))
    fail("moe_w4a16: gate/up with k_splits ", a.k_splits, " needs the f32 scratch and the tickets");
  if (a.n_assign == 0) return;
  KernelParams p = params_for(w1, a);
  p.words[1] = reinterpret_cast<const uint4*>(w3.words);
  p.scales[1] = w3.scales;
  p.global_scales[1] = w3.format == Format::nvfp4 ? w3.global_scales : nullptr;
  p.h = g.h;
  p.ldh = g.ldh;
  p.limit = g.limit;
  p.y = g.scratch_g;
  p.y_up = g.scratch_u;
  p.tickets = g.tickets;
  auto stream = static_cast<cudaStream_t>(a.stream);
  // Columns past rows are w2's zero padding (its input is ldh wide).
  check(cudaMemsetAsync(g.h, 0, size_t(a.n_assign) * size_t(g.ldh) * 2, stream), "cudaMemsetAsync");
  if (a.k_splits > 1) {
    const size_t n = size_t(a.n_assign) * size_t(w1.rows) * sizeof(float);
    check(cudaMemsetAsync(g.scratch_g, 0, n, stream), "cudaMemsetAsync");
    check(cudaMemsetAsync(g.scratch_u, 0, n, stream), "cudaMemsetAsync");
  }
  launch(w1, p, a, true);
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

std::vector<float> moe_w4a16_gate_up_run_host(const std::vector<W4A16Matrix>& w1, const std::vector<W4A16Matrix>& w3,
                                              const std::vector<uint16_t>& x_bf16, const std::vector<int32_t>& offsets,
                                              const std::vector<int32_t>& x_rows, float limit, int k_splits) {
  if (w1.empty() || w1.size() != w3.size()) fail("moe_w4a16: gate/up needs as many w1 as w3 experts, at least one");
  const W4A16Matrix& e0 = w1.front();
  if (offsets.size() != w1.size() + 1 || offsets.front() != 0 || size_t(offsets.back()) != x_rows.size())
    fail("moe_w4a16: offsets must have experts + 1 entries from 0 to the number of assignments");
  const int64_t n_x = int64_t(x_bf16.size()) / e0.cols_padded;
  for (int32_t row : x_rows)
    if (row < 0 || row >= n_x) fail("moe_w4a16: x row ", row, " outside 0..", n_x - 1);
  int64_t max_per = 0;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) max_per = std::max<int64_t>(max_per, offsets[e + 1] - offsets[e]);
  auto upload = [](const std::vector<W4A16Matrix>& ex, std::vector<uint32_t>& words, std::vector<uint8_t>& scales,
                   std::vector<float>& gs) {
    for (const auto& e : ex) {
      if (e.format != ex[0].format || e.rows != ex[0].rows || e.cols != ex[0].cols)
        fail("moe_w4a16: experts differ in format or shape");
      words.insert(words.end(), e.words.begin(), e.words.end());
      scales.insert(scales.end(), e.scales.begin(), e.scales.end());
      gs.push_back(e.global_scale);
    }
  };
  std::vector<uint32_t> wd1, wd3;
  std::vector<uint8_t> sc1, sc3;
  std::vector<float> gs1, gs3;
  upload(w1, wd1, sc1, gs1);
  upload(w3, wd3, sc3, gs3);
  DeviceBuffer<uint32_t> d_w1(wd1.size(), wd1.data()), d_w3(wd3.size(), wd3.data());
  DeviceBuffer<uint8_t> d_s1(sc1.size(), sc1.data()), d_s3(sc3.size(), sc3.data());
  DeviceBuffer<float> d_g1(gs1.size(), gs1.data()), d_g3(gs3.size(), gs3.data());
  DeviceBuffer<uint16_t> d_x(x_bf16.size(), x_bf16.data());
  DeviceBuffer<int32_t> d_off(offsets.size(), offsets.data()), d_rows(x_rows.size(), x_rows.data());
  const size_t na = x_rows.size(), rows = size_t(e0.rows);
  const int64_t ldh = round_up(e0.rows, kChunkK);
  DeviceBuffer<uint16_t> d_h(na * size_t(ldh));
  DeviceBuffer<float> d_sg(na * rows), d_su(na * rows);
  DeviceBuffer<int32_t> d_tk(w1.size() * size_t(e0.rows_padded / kTileRows));
  check(cudaMemset(d_tk.p, 0, w1.size() * size_t(e0.rows_padded / kTileRows) * 4), "cudaMemset");
  const int64_t E = int64_t(w1.size());
  W4A16ExpertsDevice dw1{e0.format, E, e0.rows, e0.cols, e0.rows_padded, e0.cols_padded, d_w1.p, d_s1.p, d_g1.p};
  W4A16ExpertsDevice dw3{e0.format, E, e0.rows, e0.cols, e0.rows_padded, e0.cols_padded, d_w3.p, d_s3.p, d_g3.p};
  MoeGateUpArgs g;
  g.gemm.x = d_x.p;
  g.gemm.offsets = d_off.p;
  g.gemm.x_rows = d_rows.p;
  g.gemm.n_assign = int64_t(na);
  g.gemm.max_per_expert = max_per;
  g.gemm.k_splits = k_splits;
  g.h = d_h.p;
  g.ldh = ldh;
  g.limit = limit;
  g.scratch_g = d_sg.p;
  g.scratch_u = d_su.p;
  g.tickets = d_tk.p;
  // Twice: the second launch proves the tickets were left at zero.
  moe_w4a16_gate_up_launch(dw1, dw3, g);
  moe_w4a16_gate_up_launch(dw1, dw3, g);
  check(cudaDeviceSynchronize(), "gate/up kernel");
  std::vector<uint16_t> h(na * size_t(ldh));
  check(cudaMemcpy(h.data(), d_h.p, h.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  std::vector<float> out(na * rows);
  for (size_t a = 0; a < na; ++a)
    for (size_t r = 0; r < rows; ++r) {
      const uint32_t bits = uint32_t(h[a * size_t(ldh) + r]) << 16;
      std::memcpy(&out[a * rows + r], &bits, 4);
    }
  for (size_t a = 0; a < na; ++a)
    for (int64_t r = e0.rows; r < ldh; ++r)
      if (h[a * size_t(ldh) + size_t(r)] != 0) fail("moe_w4a16: gate/up wrote padding column ", r);
  return out;
}

}  // namespace nibble
