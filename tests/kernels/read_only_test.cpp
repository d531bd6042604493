// The read-only stand-ins of `nibble bench --backend read`: every byte of a
// row (codes and scales) reaches its checksum, the linear op writes each
// row's checksum for every token, and the MoE layer reads the down
// projections of exactly the experts its routing picks, with their weights.
// Checksums are recomputed here from the stored bytes.
#include <gtest/gtest.h>

#include <vector>

#include "format/block.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/random_weights.h"
#include "kernels/cpu/read_only.h"
#include "kernels/moe_routing.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

bool have_simd() { return best_cpu_isa(host_cpu_features()) != CpuIsa::ref; }

// Row r's code bytes and scale bytes, as the header defines them.
struct RowBytes {
  std::vector<uint8_t> codes, scales;
};

RowBytes row_bytes(const WeightView& w, int64_t r) {
  int64_t code_bytes = 0, scale_bytes = 0;
  const uint8_t* s = nullptr;
  const int64_t tiles = (w.cols + kFp8Tile - 1) / kFp8Tile;
  switch (w.format) {
    case Format::mxfp4: code_bytes = w.cols / 2; scale_bytes = w.cols / 32; s = w.scales + r * scale_bytes; break;
    case Format::nvfp4: code_bytes = w.cols / 2; scale_bytes = w.cols / 16; s = w.scales + r * scale_bytes; break;
    case Format::fp8_block128:
      code_bytes = w.cols;
      scale_bytes = (w.fp8_scale == Fp8ScaleType::f32 ? 4 : 1) * tiles;
      s = w.scales + (r / kFp8Tile) * scale_bytes;
      break;
    case Format::bf16: code_bytes = 2 * w.cols; break;
    case Format::f32: code_bytes = 4 * w.cols; break;
    case Format::int4: code_bytes = w.cols / 2; scale_bytes = w.cols / w.group * 2; s = w.scales + r * scale_bytes; break;
    case Format::int_index: break;
  }
  RowBytes b;
  b.codes.assign(w.data + r * code_bytes, w.data + (r + 1) * code_bytes);
  if (s) b.scales.assign(s, s + scale_bytes);
  return b;
}

// Little-endian 64-bit words, the last one zero-padded.
uint64_t word_sum(const std::vector<uint8_t>& p) {
  uint64_t s = 0;
  for (size_t i = 0; i < p.size(); i += 8) {
    uint64_t v = 0;
    for (size_t b = 0; b < 8 && i + b < p.size(); ++b) v |= uint64_t(p[i + b]) << (8 * b);
    s += v;
  }
  return s;
}

uint32_t expected_checksum(const WeightView& w, int64_t r) {
  const RowBytes b = row_bytes(w, r);
  const uint64_t s = word_sum(b.codes) + word_sum(b.scales);
  return uint32_t((s ^ (s >> 24) ^ (s >> 48)) & 0xFFFFFF);
}

struct Case {
  Format format;
  Fp8ScaleType fp8;
  int64_t rows, cols;
};

const Case kCases[] = {
    {Format::mxfp4, Fp8ScaleType::ue8m0, 37, 96},  {Format::nvfp4, Fp8ScaleType::ue8m0, 19, 48},
    {Format::fp8_block128, Fp8ScaleType::ue8m0, 260, 200}, {Format::fp8_block128, Fp8ScaleType::f32, 131, 135},
    {Format::bf16, Fp8ScaleType::ue8m0, 9, 13},    {Format::f32, Fp8ScaleType::ue8m0, 5, 7},
};

TEST(ReadOnly, ChecksumCoversEveryByteOfTheRow) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    OwnedWeights w = random_weights(c.format, c.rows, c.cols, seed++, c.fp8);
    const x86::RawWeights raw = cpu::raw_weights(w.view);
    for (int64_t r = 0; r < c.rows; ++r)
      ASSERT_EQ(cpu::row_checksum(raw, r), expected_checksum(w.view, r)) << format_name(c.format) << " row " << r;
    // Change each code byte of one row in turn (and, for scaled formats, each
    // scale byte): the row's checksum moves, its neighbour's does not.
    const int64_t r = c.rows / 2;
    const uint32_t before = cpu::row_checksum(raw, r), next = cpu::row_checksum(raw, r + 1);
    const int64_t code_bytes = int64_t(w.data.size()) / c.rows;
    for (int64_t b = 0; b < code_bytes; ++b) {
      uint8_t& byte = w.data[size_t(r * code_bytes + b)];
      byte ^= 0x5A;
      EXPECT_NE(cpu::row_checksum(raw, r), before) << format_name(c.format) << " code byte " << b;
      EXPECT_EQ(cpu::row_checksum(raw, r + 1), next);
      byte ^= 0x5A;
    }
    if (c.format == Format::mxfp4 || c.format == Format::nvfp4) {
      const int64_t sb = int64_t(w.scales.size()) / c.rows;
      for (int64_t b = 0; b < sb; ++b) {
        uint8_t& byte = w.scales[size_t(r * sb + b)];
        byte ^= 0x21;
        EXPECT_NE(cpu::row_checksum(raw, r), before) << format_name(c.format) << " scale byte " << b;
        byte ^= 0x21;
      }
    }
  }
}

TEST(ReadOnly, LinearWritesEachRowsChecksumForEveryToken) {
  if (!have_simd()) GTEST_SKIP() << "no AVX2";
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    OwnedWeights w = random_weights(c.format, c.rows, c.cols, 7, c.fp8);
    const x86::RawWeights raw = cpu::raw_weights(w.view);
    const int64_t n = 3;
    std::vector<float> x(size_t(n * c.cols), 0.5f), y(size_t(n * c.rows), -1.0f);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      linear_read_only(w.view, x.data(), n, y.data(), p);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < c.rows; ++r)
          ASSERT_EQ(y[size_t(t * c.rows + r)], float(cpu::row_checksum(raw, r))) << format_name(c.format);
    }
  }
}

TEST(ReadOnly, MoeReadsTheRoutedExpertsWithTheirWeights) {
  if (!have_simd()) GTEST_SKIP() << "no AVX2";
  const int64_t D = 64, I = 32, E = 8, K = 2, n = 5;
  std::vector<OwnedWeights> owned;
  owned.reserve(size_t(3 * (E + 1)));
  MoeWeights w;
  w.hidden = D;
  w.inter = I;
  w.n_experts = E;
  w.top_k = K;
  w.scoring = ScoringFunc::softmax;
  w.routed_scaling = 1.5f;
  OwnedWeights gate = random_weights(Format::bf16, E, D, 3);
  w.gate = gate.view;
  auto expert = [&](uint64_t s) {
    for (int i = 0; i < 3; ++i) owned.push_back(random_weights(Format::mxfp4, i == 2 ? D : I, i == 2 ? I : D, s + uint64_t(i)));
    const size_t k = owned.size();
    return ExpertWeights{owned[k - 3].view, owned[k - 2].view, owned[k - 1].view};
  };
  for (int64_t e = 0; e < E; ++e) w.experts.push_back(expert(100 + 3 * uint64_t(e)));
  w.has_shared = true;
  w.shared = expert(50);
  // Hash routing: token t's experts are row t of tid2eid, so the tokens
  // pick different experts (and token 4 repeats token 0's).
  const std::vector<int32_t> tid2eid = {0, 5, 1, 2, 7, 3, 6, 4, 5, 0};
  w.tid2eid = tid2eid.data();
  w.tid2eid_is_i64 = false;
  w.tid2eid_rows = n;
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4};

  // The stand-in's router logits are the gate rows' checksums, for every
  // token; the routing weights follow from them as in the real layer.
  const x86::RawWeights graw = cpu::raw_weights(w.gate);
  std::vector<float> logits(size_t(n * E));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) logits[size_t(t * E + e)] = float(cpu::row_checksum(graw, e));
  MoeRouting routing;
  route_tokens(w, logits.data(), ids.data(), n, &routing);
  std::vector<double> want(size_t(n * D), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const x86::RawWeights down = cpu::raw_weights(w.experts[size_t(routing.experts[size_t(t * K + j)])].w2);
      for (int64_t d = 0; d < D; ++d)
        want[size_t(t * D + d)] += double(routing.weights[size_t(t * K + j)]) * cpu::row_checksum(down, d);
    }
    const x86::RawWeights shared = cpu::raw_weights(w.shared.w2);
    for (int64_t d = 0; d < D; ++d) want[size_t(t * D + d)] += cpu::row_checksum(shared, d);
  }
  ThreadPool pool(2);
  std::vector<float> x(size_t(n * D), 0.25f), y(size_t(n * D));
  moe_read_only(w, x.data(), ids.data(), n, y.data(), &pool);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-6 * want[i]) << i;
}

}  // namespace
}  // namespace nibble
