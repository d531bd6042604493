// The CUDA backend (model/cuda_backend.h) op by op against the CPU backend,
// on random inputs of awkward shapes: the same Backend calls on both, the
// CUDA side's Tensors uploaded from and downloaded to the host. Each kernel
// is checked against its CPU formula with a tight bound in its own test
// (row_ops / rope_cuda / hyper_conn_gpu_test.cpp); here what is checked is
// the wiring (shapes, strides, which weight, which stream, mark / release
// inside an op), so one bound serves every op: 2^-16 of the CPU value's
// magnitude plus 2^-16 of the row's largest value (the hc mixes go through
// a reduction of 4 x D terms), far above the kernels' rounding and far below
// any wiring error. Skipped, saying why, without a CUDA device; the
// construction's error without one is checked on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/cuda_device.h"
#include "kernels/linear.h"
#include "kernels/moe.h"
#include "kernels/random_weights.h"
#include "model/cpu_backend.h"
#include "model/cuda_backend.h"
#include "model/deepseek_v4_rope.h"
#include "runtime/sampler.h"
#include "util/error.h"
#include "support/attention_layer.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.0f) {
  std::vector<float> v(n);
  random_normal(v.data(), int64_t(n), seed, sd);
  return v;
}

// The two backends side by side: tensors made on both from one host array.
struct Pair {
  ThreadPool pool{2};
  CpuBackend cpu{&pool, nullptr};
  CudaBackend gpu;
  struct T2 {
    Tensor c, g;
  };
  Pair() {
    cpu.begin_step(false);
    gpu.begin_step(false);
  }
  T2 make(const std::vector<float>& v, int64_t rows, int64_t cols) {
    T2 t{cpu.alloc(rows, cols), gpu.alloc(rows, cols)};
    std::copy(v.begin(), v.end(), t.c.data);
    gpu.upload(v.data(), t.g);
    return t;
  }
  T2 make(int64_t rows, int64_t cols) { return make(std::vector<float>(size_t(rows * cols)), rows, cols); }
  void expect_near(const T2& t, const char* what) {
    std::vector<float> got(size_t(t.c.rows * t.c.cols));
    gpu.download(t.g, got.data());
    for (int64_t r = 0; r < t.c.rows; ++r) {
      float row_max = 0;
      for (int64_t c = 0; c < t.c.cols; ++c) row_max = std::max(row_max, std::fabs(t.c.row(r)[c]));
      for (int64_t c = 0; c < t.c.cols; ++c) {
        const float want = t.c.row(r)[c], g = got[size_t(r * t.c.cols + c)];
        ASSERT_LE(std::fabs(g - want), 0x1p-16 * (std::fabs(want) + row_max) + 1e-30)
            << what << " row " << r << " column " << c;
      }
    }
  }
};

WeightView f32_view(const std::vector<float>& w, int64_t rows, int64_t cols, const char* name) {
  WeightView v;
  v.format = Format::f32;
  v.rows = rows;
  v.cols = cols;
  v.data = reinterpret_cast<const uint8_t*>(w.data());
  v.name = name;
  return v;
}

TEST(CudaBackendGpu, RowOpsMatchTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  const int64_t T = 5, D = 300, N = 4;
  // embed from a BF16 table, 4 copies.
  const int64_t V = 17;
  std::vector<uint16_t> table(size_t(V * D));
  for (size_t i = 0; i < table.size(); ++i) table[i] = uint16_t(0x3f80 + (i * 2654435761u) % 0x200 - 0x100);
  WeightView tv;
  tv.format = Format::bf16;
  tv.rows = V;
  tv.cols = D;
  tv.data = reinterpret_cast<const uint8_t*>(table.data());
  tv.name = "embed";
  const std::vector<int32_t> ids{16, 0, 3, 3, 9};
  auto streams = b.make(T, N * D);
  b.cpu.embed(tv, ids, N, streams.c);
  b.gpu.embed(tv, ids, N, streams.g);
  b.expect_near(streams, "embed");

  auto x = b.make(randn(size_t(T * D), 1, 3.0f), T, D);
  const std::vector<float> w = randn(size_t(D), 2);
  auto y = b.make(T, D);
  b.cpu.rms_norm(x.c, w.data(), 1e-6, y.c);
  b.gpu.rms_norm(x.g, w.data(), 1e-6, y.g);
  b.expect_near(y, "rms_norm");
  b.cpu.rms_norm(x.c, nullptr, 1e-6, x.c);  // in place, unweighted
  b.gpu.rms_norm(x.g, nullptr, 1e-6, x.g);
  b.expect_near(x, "rms_norm in place");

  b.cpu.add_to_streams(y.c, streams.c);
  b.gpu.add_to_streams(y.g, streams.g);
  b.expect_near(streams, "add_to_streams");

  const std::vector<float> bias = randn(size_t(D), 3);
  b.cpu.add_bias(y.c, bias.data());
  b.gpu.add_bias(y.g, bias.data());
  b.expect_near(y, "add_bias");

  const std::vector<int64_t> rows{4, 0, 2};
  auto picked = b.make(3, N * D);
  b.cpu.gather_rows(streams.c, rows, picked.c);
  b.gpu.gather_rows(streams.g, rows, picked.g);
  b.expect_near(picked, "gather_rows");

  const std::vector<float> fw = randn(size_t(33 * D), 4);
  const BoundLinear lin{f32_view(fw, 33, D, "f32 linear"), linear_ref};
  auto ly = b.make(T, 33);
  b.cpu.linear(lin, y.c, ly.c);
  b.gpu.linear(lin, y.g, ly.g);
  b.expect_near(ly, "linear f32");
}

// The BF16 linear on the tensor-core kernel: activations are rounded to
// BF16 (2^-9 relative each, round to nearest), weights exact, f32
// accumulation on both sides: within 2^-9 sum |x w| plus the f32 sums'
// (cols 2^-24 sum |x w|), taken as 2^-8 sum |x w|.
TEST(CudaBackendGpu, Bf16LinearMatchesTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  for (int64_t rows : {1, 70})
    for (int64_t cols : {16, 300}) {
      const int64_t T = 9;
      const std::vector<float> wf = randn(size_t(rows * cols), 13);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &wf[i], 4);
        wb[i] = uint16_t(bits >> 16);
      }
      WeightView v;
      v.format = Format::bf16;
      v.rows = rows;
      v.cols = cols;
      v.data = reinterpret_cast<const uint8_t*>(wb.data());
      v.name = "bf16 linear";
      const BoundLinear lin{v, linear_ref};
      const std::vector<float> xs = randn(size_t(T * cols), 14);
      auto x = b.make(xs, T, cols);
      auto y = b.make(T, rows);
      b.cpu.linear(lin, x.c, y.c);
      b.gpu.linear(lin, x.g, y.g);
      std::vector<float> got(size_t(T * rows)), wrow(static_cast<size_t>(cols));
      b.gpu.download(y.g, got.data());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(v, r, wrow.data());
        for (int64_t t = 0; t < T; ++t) {
          double mag = 0;
          for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(xs[size_t(t * cols + c)]) * wrow[size_t(c)]);
          ASSERT_LE(std::fabs(got[size_t(t * rows + r)] - y.c.row(t)[r]), 0x1p-8 * mag + 1e-30)
              << rows << " x " << cols << " token " << t << " row " << r;
        }
      }
    }
}

// grouped_wo_a on BF16 weights: per group the same BF16 bound as above,
// each output from its group's columns of o only.
TEST(CudaBackendGpu, GroupedWoAMatchesTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  AttentionShape s;
  s.heads = 4;
  s.head_dim = 24;
  s.o_groups = 2;
  s.o_lora = 20;
  const int64_t T = 3, G = 2, R = 20, Cg = 48;
  const std::vector<float> wf = randn(size_t(G * R * Cg), 15);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wf[i], 4);
    wb[i] = uint16_t(bits >> 16);
  }
  WeightView v;
  v.format = Format::bf16;
  v.rows = G * R;
  v.cols = Cg;
  v.data = reinterpret_cast<const uint8_t*>(wb.data());
  v.name = "wo_a";
  const BoundLinear wo_a{v, linear_ref};
  const std::vector<float> os = randn(size_t(T * G * Cg), 16);
  auto o = b.make(os, T, G * Cg);
  auto y = b.make(T, G * R);
  b.cpu.grouped_wo_a(wo_a, s, o.c, y.c);
  b.gpu.grouped_wo_a(wo_a, s, o.g, y.g);
  std::vector<float> got(size_t(T * G * R)), wrow(static_cast<size_t>(Cg));
  b.gpu.download(y.g, got.data());
  for (int64_t row = 0; row < G * R; ++row) {
    dequantize_row(v, row, wrow.data());
    const int64_t g = row / R;
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0;
      for (int64_t c = 0; c < Cg; ++c) mag += std::fabs(double(os[size_t(t * G * Cg + g * Cg + c)]) * wrow[size_t(c)]);
      ASSERT_LE(std::fabs(got[size_t(t * G * R + row)] - y.c.row(t)[row]), 0x1p-8 * mag + 1e-30)
          << "token " << t << " output " << row;
    }
  }
}

TEST(CudaBackendGpu, RopeMatchesTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  RopeConfig cfg;
  cfg.theta = 160000;
  cfg.yarn = true;
  cfg.factor = 16;
  cfg.original_max_position = 65536;
  const RopeTable table(cfg, 64);
  const int64_t heads = 3, width = 192;
  const std::vector<int64_t> pos{0, 5, 70000, 3, 1 << 18};
  auto q = b.make(randn(size_t(5 * heads * width), 5), 5, heads * width);
  for (bool inverse : {false, true}) {
    b.cpu.rope(table, q.c, heads, pos, inverse);
    b.gpu.rope(table, q.g, heads, pos, inverse);
    b.expect_near(q, inverse ? "inverse rope" : "rope");
  }
}

// One attention layer of each kind (sliding window, HCA, CSA with its
// indexer) fed the same random projections in uneven chunks (one past the
// device cache's kPiece rows between poolings) through both backends, each
// with its own cache: every output equal within 2^-14 of its row's scale
// (expf, the dot products' order, the entries' norm and RoPE; far below a
// wrong key or a wrong entry, which moves an output by the keys' own size).
// Then forks of both, truncated back by the rollback and fed on, against
// the originals fed on: the caches evolve apart and stay equal.
TEST(CudaBackendGpu, AttendMatchesTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  for (AttnKind kind : {AttnKind::sliding, AttnKind::hca, AttnKind::csa}) {
    Pair b;
    AttentionShape s;
    s.heads = 3;
    s.head_dim = 16;
    s.window = 6;
    s.rollback = 3;
    const int64_t H = s.heads, d = s.head_dim;
    uint64_t seed = 100 + uint64_t(kind) * 1000;
    // HCA pools windows of 8, CSA of 4 (its indexer too).
    const AttentionWeights w = test::attention_layer(kind, kind == AttnKind::hca ? 8 : 4, d, H, seed);
    seed += 100;
    RopeConfig rc;
    const RopeTable compress_rope(rc, 4);
    const int64_t width = w.compressor ? w.compressor->width() : 0;
    const int64_t iwidth = w.indexer ? w.indexer->compressor.width() : 0;
    auto cpu_cache = b.cpu.new_attention_cache(w, s), gpu_cache = b.gpu.new_attention_cache(w, s);
    auto feed = [&](AttentionCache* cc, AttentionCache* gc, int64_t p0, int64_t n, const char* what) {
      auto q = b.make(randn(size_t(n * H * d), seed++), n, H * d);
      auto kv = b.make(randn(size_t(n * d), seed++), n, d);
      Pair::T2 ckv{}, cscore{}, ikv{}, iscore{}, iq{}, ihw{};
      if (width) {
        ckv = b.make(randn(size_t(n * width), seed++), n, width);
        cscore = b.make(randn(size_t(n * width), seed++), n, width);
      }
      IndexerProjections ic, ig;
      if (iwidth) {
        ikv = b.make(randn(size_t(n * iwidth), seed++), n, iwidth);
        iscore = b.make(randn(size_t(n * iwidth), seed++), n, iwidth);
        iq = b.make(randn(size_t(n * 2 * 8), seed++), n, 2 * 8);
        ihw = b.make(randn(size_t(n * 2), seed++), n, 2);
        ic = IndexerProjections{ikv.c.data, iscore.c.data, iq.c.data, ihw.c.data};
        ig = IndexerProjections{ikv.g.data, iscore.g.data, iq.g.data, ihw.g.data};
      }
      auto o = b.make(n, H * d);
      b.cpu.attend(w, s, compress_rope, AttnSeq{cc, 0, n, p0}, q.c, kv.c, ckv.c, cscore.c, iwidth ? &ic : nullptr,
                   o.c);
      b.gpu.attend(w, s, compress_rope, AttnSeq{gc, 0, n, p0}, q.g, kv.g, ckv.g, cscore.g, iwidth ? &ig : nullptr,
                   o.g);
      std::vector<float> got(size_t(n * H * d));
      b.gpu.download(o.g, got.data());
      for (int64_t t = 0; t < n; ++t) {
        float row_max = 0;
        for (int64_t c = 0; c < H * d; ++c) row_max = std::max(row_max, std::fabs(o.c.row(t)[c]));
        for (int64_t c = 0; c < H * d; ++c)
          ASSERT_LE(std::fabs(got[size_t(t * H * d + c)] - o.c.row(t)[c]), 0x1p-14 * row_max + 1e-30)
              << what << ": kind " << int(kind) << " position " << p0 + t << " channel " << c;
      }
    };
    int64_t p = 0;
    for (int64_t n : {5, 1, 1, 9, 2, 70, 1, 1, 3}) {
      feed(cpu_cache.get(), gpu_cache.get(), p, n, "fed");
      p += n;
    }
    auto cpu_fork = cpu_cache->clone(), gpu_fork = gpu_cache->clone();
    const int64_t back = std::max(cpu_fork->truncate_floor(), gpu_fork->truncate_floor());
    ASSERT_LE(back, p - s.rollback) << "kind " << int(kind);
    cpu_fork->truncate(back);
    gpu_fork->truncate(back);
    feed(cpu_fork.get(), gpu_fork.get(), back, 4, "a fork truncated and fed on");
    feed(cpu_cache.get(), gpu_cache.get(), p, 2, "the original fed on after the fork");
  }
}

TEST(CudaBackendGpu, AttendRefusesAnotherBackendsCache) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  AttentionWeights w;
  w.sink.assign(2, 0.0f);
  AttentionShape s;
  s.heads = 2;
  s.head_dim = 8;
  s.window = 4;
  auto cpu_cache = b.cpu.new_attention_cache(w, s);
  auto q = b.make(1, 16), kv = b.make(1, 8), o = b.make(1, 16);
  RopeConfig rc;
  const RopeTable rope(rc, 4);
  try {
    b.gpu.attend(w, s, rope, AttnSeq{cpu_cache.get(), 0, 1, 0}, q.g, kv.g, Tensor{}, Tensor{}, nullptr, o.g);
    FAIL() << "the CUDA attend took the CPU's cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another backend"), std::string::npos) << e.what();
  }
}

TEST(CudaBackendGpu, HyperConnectionsMatchTheCpuBackend) {
  REQUIRE_CUDA_DEVICE();
  Pair b;
  const int64_t T = 6, N = 4, D = 257, width = (2 + N) * N;
  HcShape s;
  s.streams = N;
  s.hidden = D;
  const std::vector<float> fn = randn(size_t(width * N * D), 6, 1.0f / std::sqrt(float(N * D)));
  HcWeights w;
  w.fn = BoundLinear{f32_view(fn, width, N * D, "hc_attn_fn"), linear_ref};
  w.base = randn(size_t(width), 7);
  w.scale = {0.5f, 1.0f, 2.0f};
  auto streams = b.make(randn(size_t(T * N * D), 8, 2.0f), T, N * D);
  auto x = b.make(T, D), post = b.make(T, N), comb = b.make(T, N * N);
  b.cpu.hc_pre(w, s, streams.c, x.c, post.c, comb.c);
  b.gpu.hc_pre(w, s, streams.g, x.g, post.g, comb.g);
  b.expect_near(x, "hc_pre collapsed");
  b.expect_near(post, "hc_pre post");
  b.expect_near(comb, "hc_pre comb");

  // hc_post on the same (CPU-equal within the bound) inputs, both in place.
  auto y = b.make(randn(size_t(T * D), 9), T, D);
  b.cpu.hc_post(s, y.c, post.c, comb.c, streams.c);
  b.gpu.hc_post(s, y.g, post.g, comb.g, streams.g);
  b.expect_near(streams, "hc_post");

  const std::vector<float> hfn = randn(size_t(N * N * D), 10, 1.0f / std::sqrt(float(N * D)));
  HcHeadWeights hw;
  hw.fn = BoundLinear{f32_view(hfn, N, N * D, "hc_head_fn"), linear_ref};
  hw.base = randn(size_t(N), 11);
  hw.scale = {0.8f};
  auto head = b.make(T, D);
  b.cpu.hc_head(hw, s, streams.c, head.c);
  b.gpu.hc_head(hw, s, streams.g, head.g);
  b.expect_near(head, "hc_head");
  // Every small weight went up once: norm-free here, so fn, base, scale of two hyper-connections.
  EXPECT_EQ(b.gpu.mirror().entries(), 6u);
}

// The MoE sublayer (MXFP4, NVFP4 and INT4 experts, BF16 router, FP8 shared
// expert) against moe_ref, with hash routing so that the experts are the
// same on both sides whatever the rounding (top-k selection on close scores
// is the router test's business). The GPU rounds x, the experts' h and the
// shared expert's h to BF16 (2^-9 relative each) and the router's input
// too (the weights move by about as much); summed over those four roundings
// an output is within 4 2^-9 of the magnitudes it is made of, which for
// these Gaussian weights stay within 2x the output's RMS: bound 2^-6 RMS(y).
TEST(CudaBackendGpu, MoeMatchesTheReference) {
  REQUIRE_CUDA_DEVICE();
  for (Format f : {Format::mxfp4, Format::nvfp4, Format::int4}) {
    const int64_t D = 128, I = 96, E = 8, K = 2, vocab = 50, n = 5;
    MoeWeights w;
    w.hidden = D;
    w.inter = I;
    w.n_experts = E;
    w.top_k = K;
    w.scoring = ScoringFunc::sqrtsoftplus;
    w.routed_scaling = 1.5f;
    w.swiglu_limit = 7.0f;
    std::vector<OwnedWeights> owned;
    owned.push_back(random_weights(Format::bf16, E, D, 1));
    w.gate = owned.back().view;
    for (int64_t e = 0; e < E; ++e) {
      ExpertWeights x;
      owned.push_back(random_weights(f, I, D, uint64_t(10 + 3 * e)));
      x.w1 = owned.back().view;
      owned.push_back(random_weights(f, I, D, uint64_t(11 + 3 * e)));
      x.w3 = owned.back().view;
      owned.push_back(random_weights(f, D, I, uint64_t(12 + 3 * e)));
      x.w2 = owned.back().view;
      w.experts.push_back(x);
    }
    w.has_shared = true;
    owned.push_back(random_weights(Format::fp8_block128, I, D, 2));
    w.shared.w1 = owned.back().view;
    owned.push_back(random_weights(Format::fp8_block128, I, D, 3));
    w.shared.w3 = owned.back().view;
    owned.push_back(random_weights(Format::fp8_block128, D, I, 4));
    w.shared.w2 = owned.back().view;
    std::vector<int64_t> table(size_t(vocab * K));
    for (size_t i = 0; i < table.size(); ++i) table[i] = int64_t((i * 7 + i / K) % E);
    for (int64_t t = 0; t < vocab; ++t)
      if (table[size_t(t * K)] == table[size_t(t * K + 1)]) table[size_t(t * K + 1)] = (table[size_t(t * K)] + 1) % E;
    w.tid2eid = table.data();
    w.tid2eid_is_i64 = true;
    w.tid2eid_rows = vocab;
    const std::vector<int32_t> ids{3, 49, 0, 3, 17};
    const std::vector<float> xs = randn(size_t(n * D), 20);
    std::vector<float> want(size_t(n * D));
    moe_ref(w, xs.data(), ids.data(), n, want.data(), nullptr);

    BlockWeights bw;
    bw.moe = std::move(w);
    CudaBackend gpu;
    gpu.begin_step(false);
    Tensor x = gpu.alloc(n, D), y = gpu.alloc(n, D);
    gpu.upload(xs.data(), x);
    gpu.moe(bw, x, ids, y);
    std::vector<float> got(size_t(n * D));
    gpu.download(y, got.data());
    double ss = 0;
    for (float v : want) ss += double(v) * v;
    const double rms = std::sqrt(ss / double(want.size()));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - want[i]), 0x1p-6 * rms) << format_name(f) << " element " << i;
  }
}

TEST(CudaBackendGpu, SamplesOnTheDevice) {
  REQUIRE_CUDA_DEVICE();
  CudaBackend gpu;
  gpu.begin_step(false);
  const int64_t rows = 3, V = 5000;
  std::vector<float> host = randn(size_t(rows * V), 12);
  host[size_t(1 * V + 4321)] = 50;  // row 1's argmax
  Tensor logits = gpu.alloc(rows, V);
  gpu.upload(host.data(), logits);
  std::vector<DrawParams> params(static_cast<size_t>(rows));  // greedy, then two draws at temperature 1
  params[0].temperature = 0;
  params[1].u = 0.999;
  params[2].u = 0.0;
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  gpu.draw_tokens(logits, params, ids);
  EXPECT_EQ(ids[0], argmax(host.data(), V));
  EXPECT_EQ(ids[1], 4321) << "a logit 50 above the rest holds all the mass";
  // u = 0 draws the most likely token.
  EXPECT_EQ(ids[2], argmax(host.data() + 2 * V, V));
}

TEST(CudaBackendGpu, OpsWithoutAKernelSaySo) {
  REQUIRE_CUDA_DEVICE();
  CudaBackend gpu;
  gpu.begin_step(false);
  // A dense MXFP4 matrix: DeepSeek-V4-Flash has none, so no kernel yet.
  std::vector<float> codes(64, 0.0f);
  WeightView v = f32_view(codes, 8, 64, "an mxfp4 matrix");
  v.format = Format::mxfp4;
  Tensor x = gpu.alloc(1, 64), y = gpu.alloc(1, 8);
  try {
    gpu.linear(BoundLinear{v, linear_ref}, x, y);
    FAIL() << "an MXFP4 linear ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the CUDA backend has no linear on mxfp4 weights yet"), std::string::npos)
        << e.what();
  }
}

// Runs everywhere (gpu-check counts a skip with a GPU present as a failure):
// without a device the construction says why; with one it works.
TEST(CudaBackend, ConstructionSaysWhyWithoutADevice) {
  if (!cuda_probe().devices.empty()) {
    CudaBackend gpu;
    gpu.begin_step(false);
    EXPECT_NE(gpu.alloc(3, 5).data, nullptr);
    return;
  }
  try {
    CudaBackend gpu;
    FAIL() << "a CUDA backend was made without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
