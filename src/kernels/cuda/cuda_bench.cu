// The GPU benchmarks behind `nibble bench linear|moe --device cuda`
// (cuda_bench.h). Weights are random (kernels/random_weights), repacked as
// at load, and copied enough times that the copies cycled through exceed
// the L2 several times over, so every call streams from HBM as decode does.
#include "kernels/cuda/cuda_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "device/cuda_device.h"
#include "format/element.h"
#include "device/cuda_check.cuh"
#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/moe_router.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/random_weights.h"
#include "util/error.h"

namespace nibble {

namespace {

constexpr CudaCheck check{"bench --device cuda"};

// Device allocations freed at scope exit.
struct Arena {
  std::vector<void*> ptrs;
  template <class T>
  T* alloc(size_t n, const void* host = nullptr, size_t host_bytes = 0) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 1)), "cudaMalloc");
    ptrs.push_back(p);
    if (host) check(cudaMemcpy(p, host, host_bytes ? host_bytes : n * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return static_cast<T*>(p);
  }
  ~Arena() {
    for (void* p : ptrs) cudaFree(p);
  }
};

struct Timer {
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  Timer() {
    check(cudaEventCreate(&t0), "cudaEventCreate");
    check(cudaEventCreate(&t1), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
  }
  template <class F>
  double seconds_per_call(int iters, F&& call) {
    call(0);  // warm-up
    check(cudaEventRecord(t0), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) call(i + 1);
    check(cudaEventRecord(t1), "cudaEventRecord");
    check(cudaEventSynchronize(t1), "kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    return double(ms) * 1e-3 / std::max(iters, 1);
  }
};

CudaBenchReport start_report() {
  const CudaProbe& probe = cuda_probe();
  if (!probe.error.empty()) fail(probe.error);
  CudaBenchReport r;
  const Device d = cuda_device("cuda:0");  // measures the read bandwidth now (4 GiB, best of 5)
  r.device = d.description;
  r.read_gbps = d.bandwidth_gbps;
  r.tc_peak_gflops = d.peak_gflops;
  return r;
}

// Copies so that the set cycled through is >= 8x a 50 MB L2 (H200's is 50 MB;
// B200's 126 MB is covered by 400 MB too), at most 64.
int copies_for(uint64_t bytes) {
  return int(std::clamp<uint64_t>((uint64_t(400) << 20) / std::max<uint64_t>(bytes, 1) + 1, 1, 64));
}

void finish_row(CudaBenchRow& row, const CudaBenchReport& r, double flops) {
  row.gbps = row.bytes / (row.us * 1e-6) / 1e9;
  row.read_ratio = row.gbps / r.read_gbps;
  row.tc_ratio = r.tc_peak_gflops > 0 ? flops / (row.us * 1e-6) / 1e9 / r.tc_peak_gflops : 0;
}

// Times the other K splits (1, 2, 4, 8, 16 that the matrix allows) next to
// the heuristic's, and keeps the fastest: how far the heuristic is off.
template <class F>
void sweep_splits(CudaBenchRow& row, int64_t chunks, F&& time_split) {
  row.best_split = row.k_splits;
  row.best_us = row.us;
  for (int k : {1, 2, 4, 8, 16}) {
    if (k == row.k_splits || k > chunks) continue;
    const double us = time_split(k);
    if (us < row.best_us) {
      row.best_us = us;
      row.best_split = k;
    }
  }
}

// 0, 1, ..., n-1 on the device (the down projection reads h in
// assignment order), made once per size.
const int32_t* identity_rows(int64_t n) {
  static std::vector<std::pair<int64_t, int32_t*>> made;  // freed at exit: benchmark only
  for (auto& [m, p] : made)
    if (m == n) return p;
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t(i);
  int32_t* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * 4), "cudaMalloc");
  check(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  made.emplace_back(n, p);
  return p;
}

}  // namespace

CudaBenchReport cuda_bench_linear(Format format, int64_t rows, int64_t cols, const std::vector<int64_t>& tokens,
                                  int iters) {
  if (format != Format::fp8_block128 && format != Format::bf16)
    fail("bench linear --device cuda: the tensor-core linears take fp8_block128 or bf16, not ", format_name(format));
  CudaBenchReport r = start_report();
  OwnedWeights w = random_weights(format, rows, cols, 42);
  const MmaMatrix m = repack_mma(w.view);
  const int copies = copies_for(m.bytes());
  Arena arena;
  std::vector<MmaWeightsDevice> dev(size_t(copies), mma_device_shape(m));
  for (auto& d : dev) {
    d.words = arena.alloc<uint8_t>(m.words.size(), m.words.data());
    d.scales = m.scales.empty() ? nullptr : arena.alloc<float>(m.scales.size(), m.scales.data());
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  Timer timer;
  for (int64_t n : tokens) {
    std::vector<uint16_t> x(size_t(n * m.cols_padded), bf16_encode(0.25f));
    uint16_t* dx = arena.alloc<uint16_t>(x.size(), x.data());
    float* dy = arena.alloc<float>(size_t(n * rows));
    CudaBenchRow row;
    row.op = "linear";
    row.format = format_name(format);
    row.tokens = n;
    row.k_splits = linear_mma_k_splits(m.rows_padded, m.chunks(), sms);
    auto time_split = [&](int k) {
      return 1e6 * timer.seconds_per_call(iters, [&](int i) { linear_mma_launch(dev[size_t(i % copies)], dx, n, dy, k); });
    };
    row.us = time_split(row.k_splits);
    sweep_splits(row, m.chunks(), time_split);
    row.bytes = double(m.bytes()) + double(x.size()) * 2;
    finish_row(row, r, 2.0 * double(rows) * double(cols) * double(n));
    r.rows.push_back(row);
  }
  return r;
}

CudaBenchReport cuda_bench_moe(Format format, const std::vector<int64_t>& tokens, int iters) {
  if (format != Format::mxfp4 && format != Format::nvfp4 && format != Format::int4)
    fail("bench moe --device cuda: the W4A16 MoE kernel takes mxfp4, nvfp4 or int4, not ", format_name(format));
  constexpr int kExperts = 256, kTopK = 6, kRoutings = 8;
  CudaBenchReport r = start_report();
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  Timer timer;
  struct Proj {
    const char* name;
    int64_t rows, cols;
    bool gate_up;  // w1 and w3 in one launch, fused with the SwiGLU (what the engine runs)
  };
  for (Proj pj : {Proj{"moe w1", 2048, 4096, false}, Proj{"moe gate_up", 2048, 4096, true},
                  Proj{"moe w2", 4096, 2048, false}}) {
    // 256 distinct experts per projection (one random matrix's bytes copied,
    // so each streams from its own addresses): 256 x 4.4 MB exceeds any L2.
    OwnedWeights one = random_weights(format, pj.rows, pj.cols, 42);
    const W4A16Matrix m = repack_w4a16(one.view);
    Arena arena;
    auto upload_stack = [&]() {
      uint32_t* words = arena.alloc<uint32_t>(m.words.size() * kExperts);
      uint8_t* scales = arena.alloc<uint8_t>(m.scales.size() * kExperts);
      for (int e = 0; e < kExperts; ++e) {
        check(cudaMemcpy(words + m.words.size() * e, m.words.data(), m.words.size() * 4, cudaMemcpyHostToDevice),
              "upload");
        check(cudaMemcpy(scales + m.scales.size() * e, m.scales.data(), m.scales.size(), cudaMemcpyHostToDevice),
              "upload");
      }
      std::vector<float> g(kExperts, m.global_scale);
      float* gs = arena.alloc<float>(kExperts, g.data());
      return W4A16ExpertsDevice{format, kExperts, pj.rows, pj.cols, m.rows_padded, m.cols_padded, words, scales, gs};
    };
    const W4A16ExpertsDevice w = upload_stack();
    const W4A16ExpertsDevice w3 = pj.gate_up ? upload_stack() : w;
    const int64_t ldh = (pj.rows + 63) / 64 * 64;
    int32_t* tickets = nullptr;
    if (pj.gate_up) {
      tickets = arena.alloc<int32_t>(size_t(kExperts) * size_t(m.rows_padded / 16));
      check(cudaMemset(tickets, 0, size_t(kExperts) * size_t(m.rows_padded / 16) * 4), "cudaMemset");
    }
    for (int64_t n : tokens) {
      // kRoutings different routings, one per call in turn: a call's experts
      // were last read 7 calls earlier (>= 8 x 6 x 4.4 MB past the L2 at
      // one token), so they stream from HBM as a real decode step's do.
      std::vector<MoeGemmArgs> as(kRoutings);
      double distinct_sum = 0;
      int64_t busy_max = 0;
      std::vector<uint16_t> x(size_t(n * m.cols_padded), bf16_encode(0.5f));
      const uint16_t* dx = arena.alloc<uint16_t>(x.size(), x.data());
      float* dy = arena.alloc<float>(size_t(n * kTopK) * size_t(pj.rows));
      for (int q = 0; q < kRoutings; ++q) {
        std::mt19937 rng{uint32_t(n * 1000 + q)};
        std::vector<std::vector<int32_t>> per(kExperts);
        for (int64_t t = 0; t < n; ++t) {
          std::set<int> chosen;
          while (int(chosen.size()) < kTopK) chosen.insert(int(rng() % kExperts));
          for (int e : chosen) per[size_t(e)].push_back(int32_t(t));
        }
        std::vector<int32_t> offsets{0}, x_rows;
        int64_t max_per = 0, distinct = 0;
        for (const auto& v : per) {
          x_rows.insert(x_rows.end(), v.begin(), v.end());
          offsets.push_back(int32_t(x_rows.size()));
          max_per = std::max<int64_t>(max_per, int64_t(v.size()));
          distinct += !v.empty();
        }
        MoeGemmArgs& a = as[size_t(q)];
        a.x = dx;
        a.offsets = arena.alloc<int32_t>(offsets.size(), offsets.data());
        a.x_rows = arena.alloc<int32_t>(x_rows.size(), x_rows.data());
        a.y = dy;
        a.n_assign = int64_t(x_rows.size());
        a.max_per_expert = max_per;
        distinct_sum += double(distinct);
        busy_max = std::max(busy_max, distinct);
      }
      const double distinct = distinct_sum / kRoutings;
      MoeGateUpArgs gu;
      if (pj.gate_up) {
        gu.h = arena.alloc<uint16_t>(size_t(n * kTopK) * size_t(ldh));
        gu.ldh = ldh;
        gu.limit = 10.0f;
        gu.scratch_g = dy;
        gu.scratch_u = arena.alloc<float>(size_t(n * kTopK) * size_t(pj.rows));
        gu.tickets = tickets;
      }
      CudaBenchRow row;
      row.op = pj.name;
      row.format = format_name(format);
      row.tokens = n;
      row.experts = int64_t(distinct + 0.5);
      row.k_splits = moe_w4a16_k_splits(busy_max * (m.rows_padded / 16), m.cols_padded, sms);
      auto time_split = [&](int k) {
        return 1e6 * timer.seconds_per_call(iters, [&](int i) {
          MoeGemmArgs a = as[size_t(i % kRoutings)];
          a.k_splits = k;
          if (pj.gate_up) {
            gu.gemm = a;
            moe_w4a16_gate_up_launch(w, w3, gu);
          } else {
            moe_w4a16_launch(w, a);
          }
        });
      };
      row.us = time_split(row.k_splits);
      sweep_splits(row, m.chunks(), time_split);
      const double projections = pj.gate_up ? 2 : 1;
      row.bytes = projections * distinct * double(m.bytes()) + double(x.size()) * 2;
      finish_row(row, r, projections * 2.0 * double(pj.rows) * double(pj.cols) * double(n * kTopK));
      r.rows.push_back(row);
    }
  }
  return r;
}

CudaBenchReport cuda_bench_moe_layer(Format format, const std::vector<int64_t>& tokens, int iters) {
  if (format != Format::mxfp4 && format != Format::nvfp4 && format != Format::int4)
    fail("bench moe --device cuda: the W4A16 MoE kernel takes mxfp4, nvfp4 or int4, not ", format_name(format));
  constexpr int64_t kExperts = 256, kTopK = 6, kHidden = 4096, kInter = 2048;
  constexpr int kRoutings = 8;
  CudaBenchReport r = start_report();
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  Arena arena;
  // Routed experts: one random matrix per projection copied to 256 places.
  auto stack = [&](int64_t rows, int64_t cols, uint64_t seed) {
    OwnedWeights one = random_weights(format, rows, cols, seed);
    const W4A16Matrix m = repack_w4a16(one.view);
    uint32_t* words = arena.alloc<uint32_t>(m.words.size() * kExperts);
    uint8_t* scales = arena.alloc<uint8_t>(m.scales.size() * kExperts);
    for (int64_t e = 0; e < kExperts; ++e) {
      check(cudaMemcpy(words + m.words.size() * e, m.words.data(), m.words.size() * 4, cudaMemcpyHostToDevice), "upload");
      check(cudaMemcpy(scales + m.scales.size() * e, m.scales.data(), m.scales.size(), cudaMemcpyHostToDevice), "upload");
    }
    std::vector<float> g(size_t(kExperts), m.global_scale);
    float* gs = arena.alloc<float>(size_t(kExperts), g.data());
    return std::make_pair(W4A16ExpertsDevice{format, kExperts, rows, cols, m.rows_padded, m.cols_padded, words, scales, gs},
                          m.bytes());
  };
  const auto w1_pair = stack(kInter, kHidden, 1);
  const W4A16ExpertsDevice w1 = w1_pair.first;
  const uint64_t expert_proj_bytes = w1_pair.second;
  const auto w3 = stack(kInter, kHidden, 2).first;
  const auto w2 = stack(kHidden, kInter, 3).first;
  // The router (BF16 [256, 4096], bias) and the FP8 shared expert, as DeepSeek-V4 ships them.
  auto linear = [&](Format f, int64_t rows, int64_t cols, uint64_t seed) {
    OwnedWeights w = random_weights(f, rows, cols, seed);
    const MmaMatrix m = repack_mma(w.view);
    MmaWeightsDevice d = mma_device_shape(m);
    d.words = arena.alloc<uint8_t>(m.words.size(), m.words.data());
    d.scales = m.scales.empty() ? nullptr : arena.alloc<float>(m.scales.size(), m.scales.data());
    return std::make_pair(d, m.bytes());
  };
  const auto gate_pair = linear(Format::bf16, kExperts, kHidden, 4);
  const auto s1_pair = linear(Format::fp8_block128, kInter, kHidden, 5);
  const MmaWeightsDevice gate = gate_pair.first, s1 = s1_pair.first;
  const uint64_t gate_bytes = gate_pair.second, shared_bytes = s1_pair.second;
  const auto s3 = linear(Format::fp8_block128, kInter, kHidden, 6).first;
  const auto s2 = linear(Format::fp8_block128, kHidden, kInter, 7).first;
  std::vector<float> bias(static_cast<size_t>(kExperts));
  random_normal(bias.data(), kExperts, 8, 0.01f);
  const float* d_bias = arena.alloc<float>(bias.size(), bias.data());
  int32_t* tickets = arena.alloc<int32_t>(size_t(kExperts * (kInter / 16)));
  check(cudaMemset(tickets, 0, size_t(kExperts * (kInter / 16)) * 4), "cudaMemset");
  int32_t* error = arena.alloc<int32_t>(1);
  check(cudaMemset(error, 0, 4), "cudaMemset");
  Timer timer;
  for (int64_t n : tokens) {
    const int64_t na = n * kTopK;
    // kRoutings different inputs, one per call in turn, so that the experts
    // they route to were not read just before (L2): as in cuda_bench_moe.
    std::vector<const float*> dxs;
    for (int q = 0; q < kRoutings; ++q) {
      std::vector<float> x(static_cast<size_t>(n * kHidden));
      random_normal(x.data(), int64_t(x.size()), uint64_t(n * 1000 + q));
      dxs.push_back(arena.alloc<float>(x.size(), x.data()));
    }
    uint16_t* xb = arena.alloc<uint16_t>(size_t(n * kHidden));
    float* logits = arena.alloc<float>(size_t(n * kExperts));
    int32_t* experts = arena.alloc<int32_t>(size_t(na));
    float* weights = arena.alloc<float>(size_t(na));
    int32_t* offsets = arena.alloc<int32_t>(size_t(kExperts + 1));
    int32_t* x_rows = arena.alloc<int32_t>(size_t(na));
    int32_t* slots = arena.alloc<int32_t>(size_t(na));
    uint16_t* h = arena.alloc<uint16_t>(size_t(na * kInter));
    float* sg = arena.alloc<float>(size_t(na * kInter));
    float* su = arena.alloc<float>(size_t(na * kInter));
    float* ya = arena.alloc<float>(size_t(na * kHidden));
    float* g = arena.alloc<float>(size_t(n * kInter));
    float* u = arena.alloc<float>(size_t(n * kInter));
    uint16_t* hs = arena.alloc<uint16_t>(size_t(n * kInter));
    float* ys = arena.alloc<float>(size_t(n * kHidden));
    float* y = arena.alloc<float>(size_t(n * kHidden));
    // Without a host sync the launcher knows only bounds: at most n tokens
    // per expert, at most min(6n, 256) experts busy.
    const int64_t busy = std::min<int64_t>(na, kExperts);
    const int ks_up = moe_w4a16_k_splits(busy * (kInter / 16), kHidden, sms);
    const int ks_down = moe_w4a16_k_splits(busy * (kHidden / 16), kInter, sms);
    auto lin = [&](const MmaWeightsDevice& w, const uint16_t* in, float* out) {
      linear_mma_launch(w, in, n, out, linear_mma_k_splits(w.rows_padded, w.cols_padded / (w.format == Format::bf16 ? 16 : 32), sms));
    };
    auto step = [&](int i) {
      to_bf16_padded(dxs[size_t(i % kRoutings)], n, kHidden, kHidden, xb);
      lin(gate, xb, logits);
      RouteDeviceArgs ra;
      ra.logits = logits;
      ra.bias = d_bias;
      ra.n = n;
      ra.n_experts = kExperts;
      ra.top_k = kTopK;
      ra.routed_scaling = 1.5f;
      ra.experts = experts;
      ra.weights = weights;
      ra.error = error;
      moe_route_launch(ra);
      moe_group_launch(experts, n, kTopK, kExperts, offsets, x_rows, slots);
      MoeGateUpArgs gu;
      gu.gemm.x = xb;
      gu.gemm.offsets = offsets;
      gu.gemm.x_rows = x_rows;
      gu.gemm.n_assign = na;
      gu.gemm.max_per_expert = n;
      gu.gemm.k_splits = ks_up;
      gu.h = h;
      gu.ldh = kInter;
      gu.limit = 10.0f;
      gu.scratch_g = sg;
      gu.scratch_u = su;
      gu.tickets = tickets;
      moe_w4a16_gate_up_launch(w1, w3, gu);
      MoeGemmArgs down;
      down.x = h;
      down.offsets = offsets;
      down.x_rows = nullptr;
      down.n_assign = na;
      down.max_per_expert = n;
      down.k_splits = ks_down;
      // h is one row per assignment, in assignment order: x_rows = identity.
      down.x_rows = identity_rows(na);
      down.y = ya;
      moe_w4a16_launch(w2, down);
      lin(s1, xb, g);
      lin(s3, xb, u);
      swiglu_bf16_launch(g, u, n, kInter, kInter, 10.0f, hs);
      lin(s2, hs, ys);
      moe_combine_launch(ya, slots, weights, ys, n, kTopK, kHidden, y);
    };
    CudaBenchRow row;
    row.op = "moe layer";
    row.format = format_name(format);
    row.tokens = n;
    row.k_splits = ks_up;
    row.us = 1e6 * timer.seconds_per_call(iters, step);
    row.best_split = ks_up;
    row.best_us = row.us;
    // The experts each input routes to, counted by running each once more.
    double distinct = 0;
    for (int q = 0; q < kRoutings; ++q) {
      step(q);
      std::vector<int32_t> off(static_cast<size_t>(kExperts + 1));
      check(cudaMemcpy(off.data(), offsets, off.size() * 4, cudaMemcpyDeviceToHost), "download");
      for (int64_t e = 0; e < kExperts; ++e) distinct += off[size_t(e + 1)] > off[size_t(e)];
    }
    distinct /= kRoutings;
    int32_t err = 0;
    check(cudaMemcpy(&err, error, 4, cudaMemcpyDeviceToHost), "download");
    if (err) fail("bench moe layer: the router flagged token ", err - 1);
    row.experts = int64_t(distinct + 0.5);
    row.bytes = distinct * 3 * double(expert_proj_bytes) + double(gate_bytes) + 3 * double(shared_bytes) +
                double(n * kHidden) * 4;
    finish_row(row, r, 2.0 * double(n) * double(kHidden) * double(kExperts + 3 * kInter * (kTopK + 1)));
    r.rows.push_back(row);
  }
  return r;
}

}  // namespace nibble
