// The CPU backend: every op of model/backend.h on host memory, with the
// kernels the plan bound (kernels/cpu/) and the f32 model math of
// deepseek_v4_{hc,attention,compressor,indexer}.cpp, on one thread pool.
// It is the reference every other backend is checked against.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/backend.h"
#include "util/thread_pool.h"

namespace nibble {

class CpuBackend : public Backend {
 public:
  // attention_isa: the path attend and mla_attend run
  // (deepseek_v4_attention.h, deepseek_v3_attention.h); unset, the host's best.
  CpuBackend(ThreadPool* pool, ForwardProfile* profile, std::optional<CpuIsa> attention_isa = std::nullopt);
  const char* name() const override { return "cpu"; }
  ForwardProfile* profile() const override { return profile_; }

  void begin_step(bool) override { used_ = 0; }
  Tensor alloc(int64_t rows, int64_t cols) override;
  size_t mark() const override { return used_; }
  void release_to(size_t mark) override { used_ = mark; }

  void embed(const WeightView& table, std::span<const int32_t> ids, int64_t copies, Tensor out) override;
  void rms_norm(Tensor x, const float* weight, double eps, Tensor y) override;
  void linear(const BoundLinear& w, Tensor x, Tensor y) override;
  void rope(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions,
            bool inverse) override;
  void gather_rows(Tensor x, std::span<const int64_t> rows, Tensor out) override;
  void to_host(Tensor x, float* out) override;
  void from_host(const float* in, Tensor x) override;
  void to_host_rows(Tensor x, std::span<float* const> out) override;
  void add_to_streams(Tensor x, Tensor streams) override;
  void moe(const BlockWeights& w, Tensor x, std::span<const int32_t> ids, Tensor y) override;

  std::unique_ptr<AttentionCache> new_attention_cache(const AttentionWeights& w, const AttentionShape& s) override;
  void hc_pre(const HcWeights& w, const HcShape& s, Tensor streams, Tensor x, Tensor post, Tensor comb) override;
  void hc_post(const HcShape& s, Tensor y, Tensor post, Tensor comb, Tensor streams) override;
  void hc_head(const HcHeadWeights& w, const HcShape& s, Tensor streams, Tensor y) override;
  void grouped_wo_a(const BoundLinear& wo_a, const AttentionShape& s, Tensor o, Tensor y) override;
  void attend(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope, const AttnSeq& seq,
              Tensor q, Tensor kv, Tensor comp_kv, Tensor comp_score, const IndexerProjections* idx,
              Tensor o) override;

  void add_bias(Tensor y, const float* bias) override;
  void rope_half_split(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions) override;
  void moe_layer(const MoeWeights& w, MoeFn fn, Tensor x, Tensor y) override;
  std::unique_ptr<AttentionCache> new_gqa_cache(const GqaShape& s, int64_t ring) override;
  void gqa_attend(const GqaShape& s, const float* sinks, const GqaSeq& seq, Tensor q, Tensor k, Tensor v,
                  Tensor o) override;

  void copy_cols(Tensor x, int64_t c0, Tensor out) override;
  void paste_cols(Tensor x, int64_t c0, Tensor out) override;
  void silu_mul(Tensor gate, Tensor up, Tensor out) override;
  std::unique_ptr<AttentionCache> new_mla_cache(const MlaShape& s) override;
  void mla_attend(const MlaShape& s, const float* kv_b, const MlaSeq& seq, Tensor q, Tensor latent, Tensor k_rope,
                  Tensor o) override;

 private:
  ThreadPool* pool_;
  ForwardProfile* profile_;
  CpuIsa attention_isa_;
  // The workspace: buffers handed out in order and reused by later steps;
  // they only grow, so steady-state decode allocates nothing here.
  std::vector<std::vector<float>> buffers_;
  size_t used_ = 0;
};

}  // namespace nibble
