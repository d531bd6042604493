// CudaBackend::moe: DeepSeek-V4's MoE sublayer on the part-1 kernels, in the
// order `nibble bench moe --device cuda`'s "moe layer" times it: x to BF16,
// router logits (the BF16 gate on linear_mma), routing (scores + bias top-k
// or hash), grouping by expert, the fused gate / up + clamped SwiGLU, the
// down projection, the shared expert (FP8 linears + SwiGLU step), the
// weighted combine. No host synchronisation; the launch bounds use only
// what the host knows (n tokens: at most n per expert).
#include <algorithm>
#include <numeric>

#include "device/cuda_memory.h"
#include "format/format.h"
#include "kernels/cuda/moe_router.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/w4a16_repack.h"
#include "model/cuda_backend.h"
#include "util/error.h"

namespace nibble {

W4A16ExpertsDevice CudaBackend::expert_stack(const MoeWeights& w, const WeightView ExpertWeights::*proj,
                                             const char* what) {
  if (auto it = stacks_.find((w.experts.at(0).*proj).data); it != stacks_.end()) return it->second;
  ++first_use_repacks_;
  return upload_stack(w, proj, what);
}

W4A16ExpertsDevice CudaBackend::upload_stack(const MoeWeights& w, const WeightView ExpertWeights::*proj,
                                             const char* what) {
  const WeightView& first = w.experts.at(0).*proj;
  W4A16ExpertsDevice d;
  d.format = first.format;
  d.experts = int64_t(w.experts.size());
  d.rows = first.rows;
  d.cols = first.cols;
  uint32_t* words = nullptr;
  uint8_t* scales = nullptr;
  std::vector<float> global(w.experts.size());
  size_t word_n = 0, scale_n = 0;
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const WeightView& v = w.experts[e].*proj;
    if (v.format != first.format || v.rows != first.rows || v.cols != first.cols)
      fail("moe ", v.name, ": expert ", e, "'s ", what, " is not of expert 0's format and shape");
    const W4A16Matrix m = repack_w4a16(v);  // one expert at a time: host memory stays one matrix
    if (e == 0) {
      d.rows_padded = m.rows_padded;
      d.cols_padded = m.cols_padded;
      word_n = m.words.size();
      scale_n = m.scales.size();
      words = static_cast<uint32_t*>(alloc_->allocate(word_n * 4 * w.experts.size()));
      owned_.push_back(words);
      scales = static_cast<uint8_t*>(alloc_->allocate(scale_n * w.experts.size()));
      owned_.push_back(scales);
    }
    alloc_->upload(words + word_n * e, m.words.data(), word_n * 4);
    alloc_->upload(scales + scale_n * e, m.scales.data(), scale_n);
    global[e] = m.global_scale;
  }
  d.words = words;
  d.scales = scales;
  if (d.format == Format::nvfp4) {
    auto* gs = static_cast<float*>(alloc_->allocate(global.size() * 4));
    owned_.push_back(gs);
    alloc_->upload(gs, global.data(), global.size() * 4);
    d.global_scales = gs;
  }
  return d;
}

const CudaBackend::DeviceMoe& CudaBackend::moe_weights(const MoeWeights& w) {
  if (auto it = moe_.find(&w); it != moe_.end()) return it->second;
  if (w.experts.empty()) fail("moe: a layer without experts");
  const ExpertWeights& e0 = w.experts[0];
  if (e0.fused() || e0.b13 || e0.b2 || w.gate_bias || w.swiglu_alpha != 0)
    not_yet("moe for gpt-oss-style experts (fused gate/up, biases, alpha SwiGLU)");
  if (e0.w1.format != Format::mxfp4 && e0.w1.format != Format::nvfp4 && e0.w1.format != Format::int4)
    not_yet((std::string("moe with ") + format_name(e0.w1.format) + " experts (the W4A16 kernel takes MXFP4, NVFP4, INT4)")
                .c_str());
  if (w.top_k > 32) fail("moe: top_k ", w.top_k, " exceeds the GPU router's 32");
  DeviceMoe d;
  d.w1 = expert_stack(w, &ExpertWeights::w1, "w1");
  d.w3 = expert_stack(w, &ExpertWeights::w3, "w3");
  d.w2 = expert_stack(w, &ExpertWeights::w2, "w2");
  d.bias = mirror_->device(w.bias, size_t(w.n_experts), "the router bias");
  if (w.tid2eid)
    d.tid2eid = mirror_->device(w.tid2eid, size_t(w.tid2eid_rows * w.top_k) * (w.tid2eid_is_i64 ? 8 : 4),
                                "the hash-routing table");
  const size_t tickets = size_t(w.n_experts * (d.w1.rows_padded / 16));
  d.tickets = static_cast<int32_t*>(alloc_->allocate(tickets * 4));
  owned_.push_back(d.tickets);
  cuda_memset_async(d.tickets, 0, tickets * 4, stream_);
  return moe_.emplace(&w, d).first->second;
}

void CudaBackend::moe(const BlockWeights& bw, Tensor x, std::span<const int32_t> ids, Tensor y) {
  const MoeWeights& w = bw.moe;
  const int64_t n = x.rows, D = w.hidden, E = w.n_experts, K = w.top_k, na = n * K;
  if (x.cols != D || y.rows != n || y.cols != D || (w.tid2eid && int64_t(ids.size()) != n))
    fail("moe: x [", x.rows, ", ", x.cols, "] -> y [", y.rows, ", ", y.cols, "] with ", ids.size(),
         " ids does not fit hidden ", D);
  if (n == 0) return;
  const DeviceMoe& d = moe_weights(w);
  const size_t mk = mark();
  // Activations once in BF16 at the experts' padded width.
  auto* xb = reinterpret_cast<uint16_t*>(arena_->alloc((n * d.w1.cols_padded + 1) / 2));
  to_bf16_padded(x.data, n, D, d.w1.cols_padded, xb, stream_);
  Tensor logits = alloc(n, E);
  linear(BoundLinear{w.gate, nullptr}, x, logits);

  auto ints = [&](int64_t count) { return reinterpret_cast<int32_t*>(arena_->alloc(count)); };
  int32_t *experts = ints(na), *offsets = ints(E + 1), *x_rows = ints(na), *slots = ints(na);
  float* weights = arena_->alloc(na);
  RouteDeviceArgs ra;
  ra.logits = logits.data;
  ra.bias = d.bias;
  ra.token_ids = w.tid2eid ? upload_ints(ids) : nullptr;
  ra.tid2eid = d.tid2eid;
  ra.tid2eid_is_i64 = w.tid2eid_is_i64;
  ra.tid2eid_rows = w.tid2eid_rows;
  ra.n = n;
  ra.n_experts = E;
  ra.top_k = K;
  ra.scoring = w.scoring;
  ra.norm_topk_prob = w.norm_topk_prob;
  ra.routed_scaling = w.routed_scaling;
  ra.experts = experts;
  ra.weights = weights;
  ra.error = error_;  // 1 + the first token with a bad id: reported at the next download
  ra.stream = stream_;
  if (w.tid2eid) error_ids_.assign(ids.begin(), ids.end());
  moe_route_launch(ra);
  moe_group_launch(experts, n, K, E, offsets, x_rows, slots, stream_);

  // Gate / up fused with the SwiGLU into h [na, w2.cols_padded] BF16.
  const int64_t busy = std::min(na, E);
  const int ks_up = moe_w4a16_k_splits(busy * (d.w1.rows_padded / 16), d.w1.cols_padded, sms_);
  const int ks_down = moe_w4a16_k_splits(busy * (d.w2.rows_padded / 16), d.w2.cols_padded, sms_);
  key(Launch::moe, n);
  key(Launch::moe, ks_up * 1024 + ks_down);
  auto* h = reinterpret_cast<uint16_t*>(arena_->alloc((na * d.w2.cols_padded + 1) / 2));
  MoeGateUpArgs gu;
  gu.gemm.x = xb;
  gu.gemm.offsets = offsets;
  gu.gemm.x_rows = x_rows;
  gu.gemm.n_assign = na;
  gu.gemm.max_per_expert = n;
  gu.gemm.k_splits = ks_up;
  gu.gemm.stream = stream_;
  gu.h = h;
  gu.ldh = d.w2.cols_padded;
  gu.limit = w.swiglu_limit;
  if (ks_up > 1) {
    gu.scratch_g = arena_->alloc(na * d.w1.rows);
    gu.scratch_u = arena_->alloc(na * d.w1.rows);
  }
  gu.tickets = d.tickets;
  moe_w4a16_gate_up_launch(d.w1, d.w3, gu);

  // Down: h has one row per assignment in assignment order (x_rows = identity).
  std::vector<int32_t> iota(static_cast<size_t>(na));
  std::iota(iota.begin(), iota.end(), 0);
  Tensor ya = alloc(na, D);
  MoeGemmArgs down;
  down.x = h;
  down.offsets = offsets;
  down.x_rows = upload_ints(std::span<const int32_t>(iota));
  down.y = ya.data;
  down.n_assign = na;
  down.max_per_expert = n;
  down.k_splits = ks_down;
  down.stream = stream_;
  moe_w4a16_launch(d.w2, down);

  // The shared expert: gate and up on the linears, the SwiGLU step, down.
  const float* shared = nullptr;
  if (w.has_shared) {
    const int64_t I = w.shared.w1.rows;
    Tensor g = alloc(n, I), u = alloc(n, I), ys = alloc(n, D);
    linear(BoundLinear{w.shared.w1, nullptr}, x, g);
    linear(BoundLinear{w.shared.w3, nullptr}, x, u);
    if (w.shared.w2.format == Format::fp8_block128 || w.shared.w2.format == Format::bf16) {
      const MmaEntry& s2 = mma_weights(w.shared.w2);
      auto* hs = reinterpret_cast<uint16_t*>(arena_->alloc((n * s2.w.cols_padded + 1) / 2));
      swiglu_bf16_launch(g.data, u.data, n, I, s2.w.cols_padded, w.swiglu_limit, hs, stream_);
      linear_mma_launch(s2.w, hs, n, ys.data, s2.k_splits, stream_);
    } else {
      not_yet((std::string("a shared expert with ") + format_name(w.shared.w2.format) + " weights").c_str());
    }
    shared = ys.data;
  }
  moe_combine_launch(ya.data, slots, weights, shared, n, K, D, y.data, stream_);
  release_to(mk);
}

}  // namespace nibble
