// The CUDA backend of model/backend.h (issue 16), in progress: the ops that
// have GPU kernels run on one CUDA stream over device memory (a StepArena for
// the step's Tensors, the model's matrices in a CudaWeightStore placed at
// load (place_weights; repacked on first use when not placed), a
// WeightMirror for the small host-resident weights, per-sequence
// DeviceAttentionCaches for attend); the ops that do not yet (linear on FP4
// / INT4 weights, gpt-oss's MoE, and the gpt-oss and DeepSeek-V3 ops) throw
// "the CUDA backend has no X yet", so nothing silently falls back to the
// CPU. The indexer's projections are linears and a RoPE
// (deepseek_v4_attention.cpp), so they run here. `--device cuda` makes
// DeepseekV4Model run on it (model/device_backend.h; docs/cuda.md, "The
// CUDA backend").
//
// Every Tensor this backend hands out is device memory. A step's host inputs
// (ids, positions, row lists) are staged in pinned memory and uploaded into
// the arena on the stream by the op that takes them; nothing synchronises
// until download() (or the next begin_step, when the staging is reused).
//
// Decode steps run as CUDA graphs (model/cuda_step_graph.h): begin_step
// starts capturing the stream, the step's download (or anything a capture
// cannot hold) ends it and launches the graph.
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/weight_store_cuda.h"
#include "model/backend.h"
#include "model/cuda_backend_memory.h"
#include "model/cuda_step_graph.h"

namespace nibble {

class DeviceAttentionCache;
struct DeviceCompressor;

class CudaBackend : public Backend {
 public:
  // Creates its stream on CUDA device `device` (cuda:N); throws
  // nibble::Error (CUDA's reason, or "built without CUDA") when there is none.
  // graphs: capture decode steps as CUDA graphs (never under a profile,
  // whose phases synchronise).
  explicit CudaBackend(ForwardProfile* profile = nullptr, int device = 0, bool graphs = true);
  ~CudaBackend() override;
  const char* name() const override { return "cuda"; }
  ForwardProfile* profile() const override { return profile_; }

  // Uploads every entry through the weight store (one allocation, refused
  // before any copy when the weights and kReserveBytes do not fit the GPU's
  // free memory); the ops then find their matrices there. Once only.
  void place_weights(const std::vector<StoreEntry>& entries, const StoreProgress& progress,
                     ThreadPool* pool) override;
  // Device memory left beside the weights for the step arena (activations)
  // and the sequences' caches: a model that fits with less would fail at its
  // first steps rather than at load.
  static constexpr uint64_t kReserveBytes = uint64_t(2) << 30;
  // Matrices repacked and uploaded on first use since construction: 0 for a
  // model whose weights were all placed (tests).
  int64_t first_use_repacks() const { return first_use_repacks_; }

  void begin_step(bool decode) override;
  Tensor alloc(int64_t rows, int64_t cols) override;
  size_t mark() const override { return arena_->mark(); }
  void release_to(size_t mark) override { arena_->release_to(mark); }

  void embed(const WeightView& table, std::span<const int32_t> ids, int64_t copies, Tensor out) override;
  void rms_norm(Tensor x, const float* weight, double eps, Tensor y) override;
  void linear(const BoundLinear& w, Tensor x, Tensor y) override;
  void rope(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions,
            bool inverse) override;
  void gather_rows(Tensor x, std::span<const int64_t> rows, Tensor out) override;
  void to_host(Tensor x, float* out) override { download(x, out); }
  void from_host(const float* in, Tensor x) override { upload(in, x); }
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

  // On the GPU (kernels/cuda/sampling.h): only the ids come back. Waits for
  // the step. Every row must draw from one vocabulary limit.
  void draw_tokens(Tensor logits, std::span<const DrawParams> params, std::span<int32_t> ids) override;

  // Host <-> device for callers and tests: t's rows * cols values.
  void upload(const float* host, Tensor t);
  void download(Tensor t, float* host);  // waits for every op queued so far; reports a bad token id
  // What the first steps put on the device (explain / tests).
  const StepArena& arena() const { return *arena_; }
  const WeightMirror& mirror() const { return *mirror_; }
  StepGraphStats graph_stats() const { return graphs_ ? graphs_->stats() : StepGraphStats{}; }
  std::string report() const override;

 private:
  [[noreturn]] void not_yet(const char* op) const;
  // The step graph's key: what an op launches and the branches it takes
  // (model/cuda_step_graph.h). Tags name the ops.
  enum class Launch : uint64_t {
    embed = 1, rms_norm, linear, rope, gather_rows, add_to_streams, add_bias, moe, hc_pre, hc_post, hc_head,
    wo_a, attend, pool, draw
  };
  void key(Launch op, int64_t v = 0) {
    if (graphs_) graphs_->mix((uint64_t(op) << 56) ^ uint64_t(v));
  }
  // The step's end (a download, the next begin_step): launches the capture
  // in progress, and raises the error of one a free ended quietly.
  // Allocations, frees and pageable uploads inside a step end it through
  // the allocators instead (early).
  void end_step_capture() {
    if (!graphs_) return;
    graphs_->end(false);
    graphs_->raise_lost();
  }
  // A decode step captured as a graph: its launches must not depend on
  // where in a window each sequence is (append_compressed).
  bool steady_launches() const { return graphs_ && graphs_->capturing(); }
  // A step's host integers, copied into the arena on the stream.
  template <class T>
  const T* upload_ints(std::span<const T> v) {
    float* p = arena_->alloc(int64_t((v.size() * sizeof(T) + 3) / 4));
    upload_bytes(p, v.data(), v.size() * sizeof(T));
    return reinterpret_cast<const T*>(p);
  }
  void upload_bytes(void* dst, const void* src, size_t bytes);
  // attend's compressor step (cuda_backend_attend.cpp): the rows kv, score
  // [n, width] of positions p0 .. into c's rings, every window that closes
  // pooled, normed and RoPE'd into c's entries.
  void append_compressed(DeviceAttentionCache& cache, DeviceCompressor& c, const CompressorWeights& w,
                         const RopeTable& rope, double rms_eps, const float* kv, const float* score, int64_t n,
                         int64_t p0);
  void check_errors();  // the embed's bad-id flag (synchronises)

  // The tensor-core layout of an FP8 block-128 / BF16 matrix, keyed by its
  // stored bytes: in the weight store when place_weights put it there, else
  // repacked and uploaded the first time a linear uses it (a backend used
  // without a model: tests, benchmarks).
  struct MmaEntry {
    MmaWeightsDevice w;
    int k_splits = 1;
  };
  const MmaEntry& mma_weights(const WeightView& w);
  MmaEntry mma_entry(const MmaWeightsDevice& w) const;  // w with its K split on this GPU

  // One MoE layer on the device (cuda_backend_moe.cpp): the routed experts'
  // three projections as W4A16 stacks, the router's bias / hash table, the
  // split-K tickets. Router and shared expert go through mma_weights.
  struct DeviceMoe {
    W4A16ExpertsDevice w1, w3, w2;
    const float* bias = nullptr;     // [E] or null
    const void* tid2eid = nullptr;   // [vocab, K] or null
    int32_t* tickets = nullptr;      // [E * w1.rows_padded / 16], zeroed once
  };
  const DeviceMoe& moe_weights(const MoeWeights& w);
  // One projection of every expert: the weight store's stack, or repacked
  // and uploaded now.
  W4A16ExpertsDevice expert_stack(const MoeWeights& w, const WeightView ExpertWeights::*proj, const char* what);
  W4A16ExpertsDevice upload_stack(const MoeWeights& w, const WeightView ExpertWeights::*proj, const char* what);

  ForwardProfile* profile_;
  int device_ = 0;
  void* stream_ = nullptr;
  int sms_ = 1;
  // By stored bytes and shape: a row slice starting at row 0 shares its
  // matrix's address (grouped_wo_a's first group).
  using MmaKey = std::tuple<const void*, int64_t, int64_t>;
  std::map<MmaKey, MmaEntry> mma_;
  std::map<const MoeWeights*, DeviceMoe> moe_;
  std::unique_ptr<CudaWeightStore> store_;             // place_weights' upload
  std::map<const void*, W4A16ExpertsDevice> stacks_;  // its expert stacks, by expert 0's stored bytes
  int64_t first_use_repacks_ = 0;
  std::vector<void*> owned_;  // the MmaEntry and DeviceMoe allocations
  std::unique_ptr<DeviceAllocator> alloc_;
  std::unique_ptr<StepArena> arena_;
  std::unique_ptr<WeightMirror> mirror_;
  std::unique_ptr<PinnedAllocator> pinned_;
  std::unique_ptr<StagingArena> staging_;  // the step's host inputs, pinned (reset by begin_step)
  std::unique_ptr<CudaGraphDriver> graph_driver_;
  std::unique_ptr<StepGraphs> graphs_;  // null: every step runs eagerly
  int32_t* error_ = nullptr;  // device: 1 + the first bad token of an embed since the last check
  std::vector<int32_t> error_ids_;  // the ids of the embed that may have set it, for the message
};

}  // namespace nibble
