// The MoE layer against tools/gen_moe_fixtures.py: small DeepSeek-V4-style
// layers whose outputs were computed independently (numpy from the
// dequantized weights, torch for HF's routing). Checks the routing (torch's
// top-k tie order, hash routing, weights), moe_ref, and the fused SIMD
// kernels, batched and token by token.
//
// Budgets: moe_ref and the default SIMD kernels only round in f32: 1e-5
// relative L2 of the exact layer. The opt-in int8 kernels round activations
// to int8 blocks before FP4 weights (x before w1/w3, h before w2). The
// generator computes the layer with that same rounding (expected.y_q8),
// which they must match to 1e-4: f32 accumulation, plus the odd element of h
// that sits within f32 noise of a rounding boundary and goes the other way
// (one step of one element). Against the exact layer their error is then
// the rounding's own (a few % for int8 on these heavy-tailed SwiGLU
// activations; the official DeepSeek-V4 kernels round to FP8 E4M3 at the
// same two points). The opt-in int16 kernels (AVX2) round at the same points
// with steps 127/32767 = 1/258 of int8's, and a rounding error's RMS is
// proportional to its step, so their error against the exact layer must
// stay within twice 1/258 of the int8 layer's (plus the f32 budget).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "kernels/cpu/moe_cpu.h"
#include "kernels/moe_routing.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "rounding.h"

namespace nibble {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/moe/" + name + ".safetensors";
}

// A fixture file as a MoeWeights plus the expected values.
struct Fixture {
  explicit Fixture(const std::string& name) : file(fixture_path(name)) {
    for (const TensorInfo& t : file.tensors()) tensors[t.name] = &t;
    const auto& md = file.metadata();
    auto meta = [&](const char* k) {
      auto it = md.find(k);
      if (it == md.end()) throw std::runtime_error(std::string("fixture lacks metadata ") + k);
      return it->second;
    };
    w.hidden = std::stoll(meta("hidden"));
    w.inter = std::stoll(meta("inter"));
    w.n_experts = std::stoll(meta("n_experts"));
    w.top_k = std::stoll(meta("top_k"));
    const std::string scoring = meta("scoring");
    w.scoring = scoring == "softmax" ? ScoringFunc::softmax
                : scoring == "sigmoid" ? ScoringFunc::sigmoid : ScoringFunc::sqrtsoftplus;
    w.norm_topk_prob = meta("norm_topk_prob") == "1";
    w.routed_scaling = std::stof(meta("routed_scaling"));
    w.swiglu_limit = std::stof(meta("swiglu_limit"));
    const Fp8ScaleType fp8 = meta("fp8_scale") == "f32" ? Fp8ScaleType::f32 : Fp8ScaleType::ue8m0;

    x = floats("x");
    n = int64_t(x.size()) / w.hidden;
    const TensorInfo& ids = at("token_ids");
    token_ids.resize(size_t(n));
    std::memcpy(token_ids.data(), ids.data, ids.nbytes);

    const TensorInfo& g = at("gate");
    w.gate.format = g.dtype == DType::BF16 ? Format::bf16 : Format::f32;
    w.gate.rows = w.n_experts;
    w.gate.cols = w.hidden;
    w.gate.data = g.data;
    w.gate.name = "gate";
    if (tensors.count("bias")) {
      bias = floats("bias");
      w.bias = bias.data();
    }
    if (tensors.count("tid2eid")) {
      const TensorInfo& h = at("tid2eid");
      w.tid2eid = h.data;
      w.tid2eid_is_i64 = h.dtype == DType::I64;
      w.tid2eid_rows = h.shape[0];
    }
    const Format ef = *parse_format(meta("expert_format"));
    for (int64_t e = 0; e < w.n_experts; ++e) w.experts.push_back(expert("experts." + std::to_string(e), ef, fp8));
    if (!meta("shared_format").empty()) {
      w.has_shared = true;
      w.shared = expert("shared", *parse_format(meta("shared_format")), fp8);
    }
    logits = floats("expected.logits");
    weights = floats("expected.weights");
    y = floats("expected.y");
    y_q8 = floats("expected.y_q8");
    const TensorInfo& idx = at("expected.indices");
    indices.resize(size_t(idx.numel()));
    std::memcpy(indices.data(), idx.data, idx.nbytes);
  }

  const TensorInfo& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("fixture lacks tensor " + name);
    return *it->second;
  }
  std::vector<float> floats(const std::string& name) const {
    const TensorInfo& t = at(name);
    std::vector<float> v(size_t(t.numel()));
    std::memcpy(v.data(), t.data, t.nbytes);
    return v;
  }
  WeightView view(const std::string& prefix, Format f, Fp8ScaleType fp8, int64_t rows, int64_t cols) const {
    WeightView v;
    v.format = f;
    v.rows = rows;
    v.cols = cols;
    v.data = at(prefix + ".data").data;
    if (tensors.count(prefix + ".scales")) v.scales = at(prefix + ".scales").data;
    if (tensors.count(prefix + ".global_scale")) v.global_scale = floats(prefix + ".global_scale")[0];
    v.fp8_scale = fp8;
    v.name = prefix;
    return v;
  }
  ExpertWeights expert(const std::string& p, Format f, Fp8ScaleType fp8) const {
    return {view(p + ".w1", f, fp8, w.inter, w.hidden), view(p + ".w3", f, fp8, w.inter, w.hidden),
            view(p + ".w2", f, fp8, w.hidden, w.inter)};
  }
  SafetensorsFile file;
  std::map<std::string, const TensorInfo*> tensors;
  MoeWeights w;
  int64_t n = 0;
  std::vector<float> x, bias, logits, weights, y, y_q8;
  std::vector<int32_t> token_ids, indices;
};

using test::rel_l2;  // rounding.h

const char* const kCases[] = {"mxfp4_topk_clamp", "nvfp4_hash_i64", "ties_nth_element",
                              "ties_partial_sort", "bf16_hash_i32"};

class MoeFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeFixture, RoutingMatchesTorch) {
  Fixture f(GetParam());
  MoeRouting r;
  route_tokens(f.w, f.logits.data(), f.token_ids.data(), f.n, &r);
  // Same experts in the same order (torch.topk's), ties included.
  EXPECT_EQ(r.experts, f.indices);
  for (size_t i = 0; i < r.weights.size(); ++i)
    EXPECT_NEAR(r.weights[i], f.weights[i], 2e-6 * std::fabs(f.weights[i]) + 1e-12) << "slot " << i;
}

TEST_P(MoeFixture, RouterLogits) {
  Fixture f(GetParam());
  std::vector<float> logits(f.logits.size());
  linear_ref(f.w.gate, f.x.data(), f.n, logits.data(), nullptr);
  EXPECT_LE(rel_l2(logits, f.logits), 1e-6);
}

TEST_P(MoeFixture, ReferenceLayer) {
  Fixture f(GetParam());
  std::vector<float> y(f.y.size());
  moe_ref(f.w, f.x.data(), f.token_ids.data(), f.n, y.data(), nullptr);
  EXPECT_LE(rel_l2(y, f.y), 1e-5);
}

TEST_P(MoeFixture, FusedKernels) {
  Fixture f(GetParam());
  ThreadPool pool(3);
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    for (Fp4Acts acts : {Fp4Acts::f32, Fp4Acts::int8, Fp4Acts::int16}) {
      if (!cpu_isa_unsupported(isa, host_cpu_features()).empty()) continue;
      if (acts == Fp4Acts::int16 && isa != CpuIsa::avx2) continue;  // AVX2 only
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " FP4 x " + fp4_acts_name(acts));
      const MoeFn fn = moe_for_isa(isa, acts);
      std::vector<float> y(f.y.size()), y1(f.y.size());
      fn(f.w, f.x.data(), f.token_ids.data(), f.n, y.data(), &pool);
      if (acts == Fp4Acts::f32) {
        EXPECT_LE(rel_l2(y, f.y), 1e-5);
      } else if (acts == Fp4Acts::int16) {
        EXPECT_LE(rel_l2(y, f.y), 2.0 * rel_l2(f.y_q8, f.y) * 127.0 / 32767.0 + 1e-5);
      } else {
        EXPECT_LE(rel_l2(y, f.y_q8), 1e-4);
        EXPECT_LE(rel_l2(y, f.y), rel_l2(f.y_q8, f.y) + 1e-4);
      }
      // Token by token, single-threaded: the same numbers as the batch
      // (each token's arithmetic does not depend on its neighbours, up to
      // the order of f32 sums).
      for (int64_t t = 0; t < f.n; ++t)
        fn(f.w, f.x.data() + t * f.w.hidden, f.token_ids.data() + t, 1, y1.data() + t * f.w.hidden, nullptr);
      EXPECT_LE(rel_l2(y1, y), 1e-6);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeFixture, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param); });

TEST(MoeRouting, TorchTopkTieOrder) {
  // Values from torch 2.x on CPU: topk([1,3,3,2,3,0,3], k, sorted=False).
  const float key[7] = {1, 3, 3, 2, 3, 0, 3};
  int32_t out[3];
  torch_topk_indices(key, 7, 2, out);
  EXPECT_EQ(std::vector<int32_t>(out, out + 2), (std::vector<int32_t>{1, 6}));
  torch_topk_indices(key, 7, 3, out);
  EXPECT_EQ(std::vector<int32_t>(out, out + 3), (std::vector<int32_t>{1, 6, 4}));
}

TEST(MoeRouting, BadInputsAreErrors) {
  Fixture f("nvfp4_hash_i64");
  MoeRouting r;
  std::vector<int32_t> ids = {0, 1000};
  EXPECT_THROW(route_tokens(f.w, f.logits.data(), ids.data(), 2, &r), Error);
  EXPECT_THROW(route_tokens(f.w, f.logits.data(), nullptr, 2, &r), Error);
  std::vector<int64_t> table = {0, 99};  // expert 99 of 8
  MoeWeights w = f.w;
  w.tid2eid = table.data();
  w.tid2eid_rows = 1;
  ids = {0};
  EXPECT_THROW(route_tokens(w, f.logits.data(), ids.data(), 1, &r), Error);
  w = f.w;
  w.top_k = 9;
  EXPECT_THROW(check_moe_weights(w), Error);
  w = f.w;
  w.experts[3].w2.cols = 7;
  try {
    check_moe_weights(w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.3.w2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
