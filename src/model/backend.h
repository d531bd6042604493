// The seam between DeepSeek-V4's forward and the hardware it runs on. The
// forward (deepseek_v4.cpp, deepseek_v4_block.cpp, deepseek_v4_attention.cpp)
// is written once as a sequence of these ops on Tensors, views of memory the
// backend owns; a backend implements each op on its device. The CPU backend
// (cpu_backend.h) runs today's kernels on host memory and is the oracle for
// any other.
//
// Rules that let a device backend capture a decode step as a graph: every
// buffer of a step comes from alloc() (no allocation the backend does not
// see), nothing in the op list reads a Tensor on the host but to_host, and
// the only host inputs of a step are the batch description (ids, positions,
// the per-sequence slices), which a device backend uploads once per step,
// and from_host's rows. Per-sequence caches come from the backend too
// (new_attention_cache, new_gqa_cache, new_mla_cache; model/attention_cache.h):
// host memory on the CPU backend, device memory on a device backend (see
// docs/sequences.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/weight_store.h"
#include "kernels/token_draw.h"
#include "model/deepseek_v4_attention.h"
#include "model/deepseek_v4_block.h"
#include "model/deepseek_v3_attention.h"
#include "model/deepseek_v4_hc.h"
#include "model/forward_profile.h"
#include "model/gpt_oss_attention.h"
#include "util/error.h"

namespace nibble {

// A non-owning view of f32 rows in a backend's memory: [rows, cols], rows
// contiguous (stride cols).
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0, cols = 0;

  float* row(int64_t r) const { return data + r * cols; }
  Tensor slice(int64_t r0, int64_t n) const { return Tensor{data + r0 * cols, n, cols}; }
  // The same memory seen as [rows * cols / width, width] (e.g. heads as rows).
  Tensor reshaped(int64_t width) const { return Tensor{data, rows * cols / width, width}; }
};

// Throws unless `out` has one non-null destination per row of x (to_host_rows).
void check_rows_out(Tensor x, std::span<float* const> out);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu": what `explain` shows for each op
  // Where the forward's PhaseTimers add their time (null: not profiling).
  virtual ForwardProfile* profile() const = 0;

  // Weights a backend keeps in its own memory (a GPU's), all placed at load
  // (model/deepseek_v4_store.h lists them) rather than on first use, so that
  // a model that does not fit is refused before its first step and the
  // upload reports progress (bytes done, in all; may be empty). pool (may be
  // null): threads for the host's repacking. The CPU reads the weights where
  // the checkpoint is mapped: nothing to do.
  virtual void place_weights(const std::vector<StoreEntry>& entries, const StoreProgress& progress,
                             ThreadPool* pool) {
    (void)entries, (void)progress, (void)pool;
  }

  // What the backend did that a benchmark shows beside its numbers (the
  // CUDA backend: its step graphs); empty when nothing.
  virtual std::string report() const { return {}; }

  // Step workspace. alloc() returns uninitialised memory that lives until
  // release_to() of a mark taken before it (or the next begin_step()).
  // decode: every sequence of the step feeds one token (the CUDA backend
  // captures such steps as graphs).
  virtual void begin_step(bool decode) = 0;
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual size_t mark() const = 0;
  virtual void release_to(size_t mark) = 0;

  // ---- common ops ----
  // out [T, copies * D]: row ids[t] of `table`, repeated `copies` times.
  virtual void embed(const WeightView& table, std::span<const int32_t> ids, int64_t copies, Tensor out) = 0;
  // y = x * rsqrt(mean(x^2) + eps) * weight per row (weight may be null); x and y may alias.
  virtual void rms_norm(Tensor x, const float* weight, double eps, Tensor y) = 0;
  // y [n, rows] = x [n, cols] · W^T with the kernel bound to W.
  virtual void linear(const BoundLinear& w, Tensor x, Tensor y) = 0;
  // RoPE of each row's `heads` vectors of width x.cols / heads at positions[row].
  virtual void rope(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions,
                    bool inverse) = 0;
  // out[r] = x[rows[r]].
  virtual void gather_rows(Tensor x, std::span<const int64_t> rows, Tensor out) = 0;
  // The step's only transfers to and from the caller's host memory: x
  // [rows, cols] to `out` (logits, the hidden rows a caller asked for), and
  // `in` into x (a draft layer's input rows). A device backend copies; the
  // CPU backend's Tensors are host memory already.
  virtual void to_host(Tensor x, float* out) = 0;
  virtual void from_host(const float* in, Tensor x) = 0;
  // Row r of x to out[r] ([x.cols] each; out.size() == x.rows): a step's
  // logits, each sequence's to its own buffer. One to_host into host memory,
  // then the rows scattered there, so a device backend synchronises once per
  // step, not once per sequence; the CPU backend copies each row directly.
  virtual void to_host_rows(Tensor x, std::span<float* const> out);
  // The token of each row of logits [rows, V] by kernels/token_draw.h's rule
  // with params[r] (u included), into ids[r]: only ids leave a device
  // backend. The default downloads the rows and draws on the host.
  virtual void draw_tokens(Tensor logits, std::span<const DrawParams> params, std::span<int32_t> ids);
  // streams [T, k * x.cols] += x [T, x.cols] broadcast over the k copies.
  virtual void add_to_streams(Tensor x, Tensor streams) = 0;
  // The MoE sublayer: router, routed experts, shared expert; ids [T] for hash routing.
  virtual void moe(const BlockWeights& w, Tensor x, std::span<const int32_t> ids, Tensor y) = 0;

  // ---- DeepSeek-V4 ops (dsv4.md §2) ----
  // A new, empty cache for one sequence's layer with these weights and
  // shape, which it keeps for truncate (a model's new_state asks for one
  // per layer; w outlives it). Called from any thread, also while a step
  // runs.
  virtual std::unique_ptr<AttentionCache> new_attention_cache(const AttentionWeights& w, const AttentionShape& s) = 0;
  // streams [T, N*D] -> x [T, D], post [T, N], comb [T, N*N].
  virtual void hc_pre(const HcWeights& w, const HcShape& s, Tensor streams, Tensor x, Tensor post, Tensor comb) = 0;
  // streams <- post * y + comb^T streams, in place.
  virtual void hc_post(const HcShape& s, Tensor y, Tensor post, Tensor comb, Tensor streams) = 0;
  // streams [T, N*D] -> y [T, D].
  virtual void hc_head(const HcHeadWeights& w, const HcShape& s, Tensor streams, Tensor y) = 0;
  // The grouped output projection: o [T, H*d] -> y [T, G*o_lora].
  virtual void grouped_wo_a(const BoundLinear& wo_a, const AttentionShape& s, Tensor o, Tensor y) = 0;
  // One sequence's attention: its window keys, compressor and indexer
  // updates and the attention core. q [count, H*d], kv [count, d] of its
  // tokens; comp_kv / comp_score [T, width] of the whole step (rows from
  // seq.first); idx: the indexer's projections of the whole step (CSA
  // layers; rows from seq.first); o [count, H*d]. Appends its kv to the ring.
  virtual void attend(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope,
                      const AttnSeq& seq, Tensor q, Tensor kv, Tensor comp_kv, Tensor comp_score,
                      const IndexerProjections* idx, Tensor o) = 0;

  // ---- gpt-oss ops (model/gpt_oss*.h) ----
  // Added beside the DeepSeek-V4 ones rather than bending them; a backend
  // that lacks one says so by name (the CPU backend has them all).
  // y[r] += bias for every row r (bias [y.cols]).
  virtual void add_bias(Tensor y, const float* bias) { (void)y, (void)bias, missing("add_bias"); }
  // RoPE in the half-split layout of each row's `heads` vectors at positions[row].
  virtual void rope_half_split(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions) {
    (void)table, (void)x, (void)heads, (void)positions, missing("rope_half_split");
  }
  // y [T, D] = the MoE layer (router, routing, experts; no shared expert) of x [T, D] with `fn`.
  virtual void moe_layer(const MoeWeights& w, MoeFn fn, Tensor x, Tensor y) {
    (void)w, (void)fn, (void)x, (void)y, missing("moe_layer");
  }
  // A new, empty cache for one sequence's gpt-oss layer of shape s: a
  // sliding layer's ring of `ring` slots, or (ring 0) a full layer's cache
  // of every position. Called from any thread, as new_attention_cache.
  virtual std::unique_ptr<AttentionCache> new_gqa_cache(const GqaShape& s, int64_t ring) {
    (void)s, (void)ring, missing("new_gqa_cache");
  }
  // One sequence's grouped-query attention with sinks: appends its k / v
  // [count, KV*d] to its cache, o [count, H*d] from q [count, H*d].
  virtual void gqa_attend(const GqaShape& s, const float* sinks, const GqaSeq& seq, Tensor q, Tensor k, Tensor v,
                          Tensor o) {
    (void)s, (void)sinks, (void)seq, (void)q, (void)k, (void)v, (void)o, missing("gqa_attend");
  }

  // ---- DeepSeek-V3 ops (model/deepseek_v3*.h) ----
  // out = columns [c0, c0 + out.cols) of x (splitting a fused projection).
  virtual void copy_cols(Tensor x, int64_t c0, Tensor out) { (void)x, (void)c0, (void)out, missing("copy_cols", "DeepSeek-V3"); }
  // Columns [c0, c0 + x.cols) of out = x (building a concatenation: the MTP layer's eh_proj input).
  virtual void paste_cols(Tensor x, int64_t c0, Tensor out) { (void)x, (void)c0, (void)out, missing("paste_cols", "DeepSeek-V3"); }
  // out = silu(gate) * up elementwise (the SwiGLU of a dense MLP); out may alias gate.
  virtual void silu_mul(Tensor gate, Tensor up, Tensor out) { (void)gate, (void)up, (void)out, missing("silu_mul", "DeepSeek-V3"); }
  // A new, empty latent cache for one sequence's layer of shape s.
  virtual std::unique_ptr<AttentionCache> new_mla_cache(const MlaShape& s) {
    (void)s, missing("new_mla_cache", "DeepSeek-V3");
  }
  // One sequence's latent attention (deepseek_v3_attention.h): appends its
  // latent [count, C] and RoPE'd k_rope [count, r] to its cache, o [count, H*v]
  // from q [count, H*(n+r)]; kv_b is kv_b_proj as f32 [H*(n+v), C].
  virtual void mla_attend(const MlaShape& s, const float* kv_b, const MlaSeq& seq, Tensor q, Tensor latent,
                          Tensor k_rope, Tensor o) {
    (void)s, (void)kv_b, (void)seq, (void)q, (void)latent, (void)k_rope, (void)o, missing("mla_attend", "DeepSeek-V3");
  }

 private:
  [[noreturn]] void missing(const char* op, const char* model = "gpt-oss") const {
    fail("backend ", name(), " has no op ", op, " (", model, ")");
  }
};

}  // namespace nibble
