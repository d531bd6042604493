#include "model/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "device/device.h"
#include "model/deepseek_v4_indexer.h"
#include "util/error.h"

namespace nibble {

CpuBackend::CpuBackend(ThreadPool* pool, ForwardProfile* profile, std::optional<CpuIsa> attention_isa)
    : pool_(pool),
      profile_(profile),
      attention_isa_(attention_isa ? *attention_isa : best_cpu_isa(host_cpu_features())) {}

Tensor CpuBackend::alloc(int64_t rows, int64_t cols) {
  if (used_ == buffers_.size()) buffers_.emplace_back();
  std::vector<float>& b = buffers_[used_++];
  if (b.size() < size_t(rows * cols)) b.resize(size_t(rows * cols));
  return Tensor{b.data(), rows, cols};
}

void CpuBackend::embed(const WeightView& table, std::span<const int32_t> ids, int64_t copies, Tensor out) {
  const int64_t D = table.cols;
  for (size_t t = 0; t < ids.size(); ++t) {
    float* x = out.row(int64_t(t));
    dequantize_row(table, ids[t], x);
    for (int64_t k = 1; k < copies; ++k) std::copy(x, x + D, x + k * D);
  }
}

void CpuBackend::rms_norm(Tensor x, const float* weight, double eps, Tensor y) {
  nibble::rms_norm(x.data, x.rows, x.cols, weight, eps, y.data);
}

void CpuBackend::linear(const BoundLinear& w, Tensor x, Tensor y) {
  if (x.cols != w.cols() || y.cols != w.rows() || x.rows != y.rows)
    fail("linear ", w.w.name, ": activations [", x.rows, ", ", x.cols, "] -> [", y.rows, ", ", y.cols,
         "] do not fit the weight [", w.rows(), ", ", w.cols(), "]");
  w.run(x.data, x.rows, y.data, pool_);
}

void CpuBackend::rope(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions,
                      bool inverse) {
  for (int64_t t = 0; t < x.rows; ++t) table.apply(x.row(t), heads, x.cols / heads, positions[size_t(t)], inverse);
}

void CpuBackend::gather_rows(Tensor x, std::span<const int64_t> rows, Tensor out) {
  for (size_t r = 0; r < rows.size(); ++r) std::copy(x.row(rows[r]), x.row(rows[r]) + x.cols, out.row(int64_t(r)));
}

void CpuBackend::to_host(Tensor x, float* out) { std::copy(x.data, x.data + x.rows * x.cols, out); }

void CpuBackend::from_host(const float* in, Tensor x) { std::copy(in, in + x.rows * x.cols, x.data); }

void CpuBackend::to_host_rows(Tensor x, std::span<float* const> out) {
  check_rows_out(x, out);
  for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r), x.row(r) + x.cols, out[size_t(r)]);
}

std::unique_ptr<AttentionCache> CpuBackend::new_attention_cache(const AttentionWeights& w, const AttentionShape& s) {
  return std::make_unique<HostAttentionCache>(&w, s);
}

void CpuBackend::add_to_streams(Tensor x, Tensor streams) {
  if (x.rows != streams.rows || x.cols <= 0 || streams.cols % x.cols != 0)
    fail("add_to_streams: [", x.rows, ", ", x.cols, "] does not broadcast over [", streams.rows, ", ", streams.cols, "]");
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* a = x.row(t);
    float* s = streams.row(t);
    for (int64_t c = 0; c < streams.cols; ++c) s[c] += a[c % x.cols];
  }
}

void CpuBackend::moe(const BlockWeights& w, Tensor x, std::span<const int32_t> ids, Tensor y) {
  w.moe_fn(w.moe, x.data, ids.data(), x.rows, y.data, pool_);
}

void CpuBackend::hc_pre(const HcWeights& w, const HcShape& s, Tensor streams, Tensor x, Tensor post, Tensor comb) {
  nibble::hc_pre(w, s, streams.data, streams.rows, x.data, post.data, comb.data, pool_);
}

void CpuBackend::hc_post(const HcShape& s, Tensor y, Tensor post, Tensor comb, Tensor streams) {
  nibble::hc_post(s, y.data, post.data, comb.data, streams.rows, streams.data, pool_);
}

void CpuBackend::hc_head(const HcHeadWeights& w, const HcShape& s, Tensor streams, Tensor y) {
  nibble::hc_head(w, s, streams.data, streams.rows, y.data, pool_);
}

void CpuBackend::grouped_wo_a(const BoundLinear& wo_a, const AttentionShape& s, Tensor o, Tensor y) {
  grouped_wo_a_cpu(wo_a, s, o.data, o.rows, y.data, pool_);
}

void CpuBackend::attend(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope,
                        const AttnSeq& seq, Tensor q, Tensor kv, Tensor comp_kv, Tensor comp_score,
                        const IndexerProjections* idx, Tensor o) {
  attend_cpu(w, s, compress_rope, seq, q.data, kv.data, comp_kv.data, comp_score.data, idx, o.data, pool_, profile_,
             attention_isa_);
}

void CpuBackend::add_bias(Tensor y, const float* bias) {
  for (int64_t r = 0; r < y.rows; ++r) {
    float* row = y.row(r);
    for (int64_t c = 0; c < y.cols; ++c) row[c] += bias[c];
  }
}

void CpuBackend::rope_half_split(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions) {
  nibble::rope_half_split(table, x.data, x.rows, heads, x.cols / heads, positions.data());
}

void CpuBackend::moe_layer(const MoeWeights& w, MoeFn fn, Tensor x, Tensor y) {
  fn(w, x.data, nullptr, x.rows, y.data, pool_);
}

std::unique_ptr<AttentionCache> CpuBackend::new_gqa_cache(const GqaShape& s, int64_t ring) {
  return std::make_unique<HostGqaCache>(s, ring);
}

void CpuBackend::gqa_attend(const GqaShape& s, const float* sinks, const GqaSeq& seq, Tensor q, Tensor k, Tensor v,
                            Tensor o) {
  gqa_attend_cpu(s, sinks, seq, q.data, k.data, v.data, o.data, pool_, attention_isa_);
}

void CpuBackend::copy_cols(Tensor x, int64_t c0, Tensor out) {
  if (x.rows != out.rows || c0 < 0 || c0 + out.cols > x.cols)
    fail("copy_cols: columns [", c0, ", ", c0 + out.cols, ") of [", x.rows, ", ", x.cols, "] into [", out.rows, ", ",
         out.cols, "]");
  for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r) + c0, x.row(r) + c0 + out.cols, out.row(r));
}

void CpuBackend::paste_cols(Tensor x, int64_t c0, Tensor out) {
  if (x.rows != out.rows || c0 < 0 || c0 + x.cols > out.cols)
    fail("paste_cols: [", x.rows, ", ", x.cols, "] into columns [", c0, ", ", c0 + x.cols, ") of [", out.rows, ", ",
         out.cols, "]");
  for (int64_t r = 0; r < x.rows; ++r) std::copy(x.row(r), x.row(r) + x.cols, out.row(r) + c0);
}

void CpuBackend::silu_mul(Tensor gate, Tensor up, Tensor out) {
  if (gate.rows != up.rows || gate.cols != up.cols || out.rows != gate.rows || out.cols != gate.cols)
    fail("silu_mul: [", gate.rows, ", ", gate.cols, "] * [", up.rows, ", ", up.cols, "] -> [", out.rows, ", ",
         out.cols, "]");
  const int64_t n = gate.rows * gate.cols;
  // torch's silu: x / (1 + exp(-x)), then the product with up, in f32.
  for (int64_t i = 0; i < n; ++i) out.data[i] = gate.data[i] / (1.0f + std::exp(-gate.data[i])) * up.data[i];
}

std::unique_ptr<AttentionCache> CpuBackend::new_mla_cache(const MlaShape& s) {
  return std::make_unique<HostMlaCache>(s);
}

void CpuBackend::mla_attend(const MlaShape& s, const float* kv_b, const MlaSeq& seq, Tensor q, Tensor latent,
                            Tensor k_rope, Tensor o) {
  mla_attend_cpu(s, kv_b, seq, q.data, latent.data, k_rope.data, o.data, pool_, attention_isa_);
}

}  // namespace nibble
