#include "model/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "device/cuda_device.h"
#include "device/cuda_memory.h"
#include "format/format.h"
#include "kernels/cuda/hyper_conn.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/cuda/row_ops.h"
#include "model/deepseek_v4_attention.h"
#include "model/forward_profile.h"
#include "util/error.h"

namespace nibble {

namespace {

// Device memory and uploads on the backend's stream. Each call makes the
// backend's device current first: a fork or a new sequence's cache may come
// from a thread that has not stepped the model yet (the server's).
// Allocations, frees and uploads from pageable memory end a step graph's
// capture first (`before`; quiet = true where it must not throw, the
// frees that destructors make): a graph cannot hold them, and a free
// synchronises the device. Copies on the stream are captured.
using BeforeUncapturable = std::function<void(bool quiet)>;

class CudaAllocator : public DeviceAllocator {
 public:
  CudaAllocator(int device, void* stream, BeforeUncapturable before)
      : device_(device), stream_(stream), before_(std::move(before)) {}
  void* allocate(size_t bytes) override {
    before_(false);
    cuda_set_device(device_);
    return cuda_device_alloc(bytes);
  }
  void release(void* p) override {
    before_(true);
    cuda_device_free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    before_(false);
    cuda_set_device(device_);
    cuda_upload_async(dst, src, bytes, stream_);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    cuda_set_device(device_);
    cuda_copy_async(dst, src, bytes, stream_);
  }

 private:
  int device_;
  void* stream_;
  BeforeUncapturable before_;
};

// The staging arena's page-locked memory (ends a capture first, as above).
class CudaPinnedAllocator : public PinnedAllocator {
 public:
  explicit CudaPinnedAllocator(BeforeUncapturable before) : before_(std::move(before)) {}
  void* allocate(size_t bytes) override {
    before_(false);
    return cuda_host_alloc(bytes);
  }
  void release(void* p) override {
    before_(true);
    cuda_host_free(p);
  }

 private:
  BeforeUncapturable before_;
};

void same_shape(const char* op, Tensor a, Tensor b) {
  if (a.rows != b.rows || a.cols != b.cols)
    fail(op, ": [", a.rows, ", ", a.cols, "] and [", b.rows, ", ", b.cols, "] must have one shape");
}

}  // namespace

CudaBackend::CudaBackend(ForwardProfile* profile, int device, bool graphs) : profile_(profile), device_(device) {
  cuda_set_device(device_);
  stream_ = cuda_stream_create();
  // A failure kept quietly is raised by the step's download (raise_lost).
  const BeforeUncapturable before = [this](bool quiet) {
    if (!graphs_) return;
    if (quiet)
      graphs_->end_quietly(true);
    else
      graphs_->end(true);
  };
  alloc_ = std::make_unique<CudaAllocator>(device_, stream_, before);
  arena_ = std::make_unique<StepArena>(*alloc_);
  mirror_ = std::make_unique<WeightMirror>(*alloc_);
  pinned_ = std::make_unique<CudaPinnedAllocator>(before);
  staging_ = std::make_unique<StagingArena>(*pinned_);
  error_ = static_cast<int32_t*>(cuda_device_alloc(sizeof(int32_t)));
  for (const CudaDeviceInfo& d : cuda_probe().devices)
    if (d.index == device_) sms_ = std::max(1, d.sms);
  cuda_memset_async(error_, 0, sizeof(int32_t), stream_);
  // --profile: phases time the GPU's work, not the launches; its barriers
  // synchronise, which a graph's capture cannot hold.
  if (profile_) profile_->set_barrier([this] { cuda_stream_sync(stream_); });
  if (graphs && !profile_) {
    graph_driver_ = std::make_unique<CudaGraphDriver>(stream_);
    graphs_ = std::make_unique<StepGraphs>(*graph_driver_);
  }
}

void CudaBackend::begin_step(bool decode) {
  // The kernels of a step launch from the calling thread, whose current
  // device may not be this backend's (cuda_memory.h).
  cuda_set_device(device_);
  end_step_capture();  // a step that downloaded nothing: its graph runs now
  // The last step's uploads read the staging memory until the stream has
  // run them (a step that ends with a download has waited already).
  if (staging_->staged() > 0) {
    cuda_stream_sync(stream_);
    staging_->reset();
  }
  arena_->begin_step();
  // Only decode steps: a prefill chunk's graph would be instantiated for
  // one use, and its launches are few against its work.
  if (graphs_ && decode) graphs_->begin();
}

CudaBackend::~CudaBackend() {
  if (profile_) profile_->set_barrier(nullptr);
  try {
    cuda_set_device(device_);  // the memory below is this device's
    if (graphs_) graphs_->end_quietly(false);  // the stream must not be capturing when it is synchronised
    cuda_stream_sync(stream_);  // no queued upload still reads the staging memory
  } catch (const std::exception&) {
    // A lost device or a failed kernel: the frees below fail quietly either way.
  }
  graphs_.reset();
  // The arena and mirror free device memory (cudaFree synchronises first).
  arena_.reset();
  mirror_.reset();
  staging_.reset();
  for (void* p : owned_) cuda_device_free(p);
  cuda_device_free(error_);
  cuda_stream_destroy(stream_);
}

std::string CudaBackend::report() const {
  if (!graphs_) return profile_ ? "CUDA graphs off under --profile" : "CUDA graphs off (--no-cuda-graphs)";
  return describe(graphs_->stats());
}

void CudaBackend::not_yet(const char* op) const {
  fail("the CUDA backend has no ", op, " yet: run this model with --device host");
}

Tensor CudaBackend::alloc(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) fail("cuda backend: a [", rows, ", ", cols, "] buffer");
  return Tensor{arena_->alloc(rows * cols), rows, cols};
}

void CudaBackend::upload_bytes(void* dst, const void* src, size_t bytes) {
  // From pinned memory: the copy is queued, the host goes on launching.
  cuda_upload_async(dst, staging_->stage(src, bytes), bytes, stream_);
}

void CudaBackend::upload(const float* host, Tensor t) {
  upload_bytes(t.data, host, size_t(t.rows * t.cols) * sizeof(float));
}

void CudaBackend::download(Tensor t, float* host) {
  end_step_capture();
  cuda_download(host, t.data, size_t(t.rows * t.cols) * sizeof(float), stream_);
  check_errors();
}

void CudaBackend::draw_tokens(Tensor logits, std::span<const DrawParams> params, std::span<int32_t> ids) {
  if (int64_t(params.size()) != logits.rows || int64_t(ids.size()) != logits.rows)
    fail("draw_tokens: ", params.size(), " settings and ", ids.size(), " ids for ", logits.rows, " rows of logits");
  if (logits.rows == 0) return;
  // One limit for every row (the Engine gives all its sequences one).
  const int64_t limit = params[0].vocab;
  for (const DrawParams& p : params)
    if (p.vocab != limit) fail("draw_tokens: rows draw from different vocabularies (", limit, " and ", p.vocab, ")");
  const int64_t vocab = limit > 0 ? std::min(limit, logits.cols) : logits.cols;
  const size_t m = mark();
  const size_t ws = cuda_sample_workspace_bytes(logits.rows, logits.cols);
  float* w = arena_->alloc(int64_t((ws + 3) / 4));
  float* p = arena_->alloc(int64_t((params.size_bytes() + 3) / 4));
  upload_bytes(p, params.data(), params.size_bytes());
  auto* d_ids = reinterpret_cast<int32_t*>(arena_->alloc(logits.rows));
  key(Launch::draw, logits.rows);
  cuda_sample(logits.data, logits.rows, vocab, logits.cols, reinterpret_cast<const DrawParams*>(p), w, ws, d_ids,
              stream_);
  end_step_capture();  // the step's graph, sampling included, then only the ids come back
  cuda_download(ids.data(), d_ids, ids.size_bytes(), stream_);
  release_to(m);
  check_errors();
}

void CudaBackend::check_errors() {
  int32_t err = 0;
  cuda_download(&err, error_, sizeof(err), stream_);
  if (!err) return;
  cuda_memset_async(error_, 0, sizeof(int32_t), stream_);
  const size_t t = size_t(err - 1);
  fail("token ", t, t < error_ids_.size() ? " (id " + std::to_string(error_ids_[t]) + ")" : std::string(),
       " of the last embed or hash-routed MoE: its id is outside the embedding table or the hash-routing table");
}

void CudaBackend::embed(const WeightView& table, std::span<const int32_t> ids, int64_t copies, Tensor out) {
  if (out.rows != int64_t(ids.size()) || out.cols != copies * table.cols)
    fail("embed ", table.name, ": ", ids.size(), " ids x ", copies, " copies of ", table.cols,
         " do not fill [", out.rows, ", ", out.cols, "]");
  const size_t elem = table.format == Format::bf16 ? 2 : 4;  // cuda_embed refuses the other formats
  if (table.format != Format::f32 && table.format != Format::bf16)
    fail("embed ", table.name, ": ", format_name(table.format), " tables are not on the GPU yet (F32, BF16 are)");
  const void* dt = mirror_->device(table.data, size_t(table.rows * table.cols) * elem, "the embedding table");
  error_ids_.assign(ids.begin(), ids.end());
  key(Launch::embed, int64_t(ids.size()));
  cuda_embed(dt, table.format, table.rows, table.cols, upload_ints(ids), int64_t(ids.size()), copies, out.data,
             error_, stream_);
}

void CudaBackend::rms_norm(Tensor x, const float* weight, double eps, Tensor y) {
  same_shape("rms_norm", x, y);
  key(Launch::rms_norm, x.rows);
  cuda_rms_norm(x.data, x.rows, x.cols, mirror_->device(weight, size_t(x.cols), "a norm weight"), float(eps), y.data,
                stream_);
}

void CudaBackend::linear(const BoundLinear& w, Tensor x, Tensor y) {
  if (x.cols != w.cols() || y.cols != w.rows() || x.rows != y.rows)
    fail("linear ", w.w.name, ": activations [", x.rows, ", ", x.cols, "] -> [", y.rows, ", ", y.cols,
         "] do not fit the weight [", w.rows(), ", ", w.cols(), "]");
  if (x.rows == 0) return;
  key(Launch::linear, x.rows);
  if (w.w.format == Format::fp8_block128 || w.w.format == Format::bf16) {
    // Activations rounded once to BF16 rows of the padded width, then the
    // tensor-core kernel (W8A16 / BF16, f32 accumulation).
    const MmaEntry& e = mma_weights(w.w);
    const size_t m = mark();
    auto* xb = reinterpret_cast<uint16_t*>(arena_->alloc((x.rows * e.w.cols_padded + 1) / 2));
    to_bf16_padded(x.data, x.rows, x.cols, e.w.cols_padded, xb, stream_);
    linear_mma_launch(e.w, xb, x.rows, y.data, e.k_splits, stream_);
    release_to(m);
    return;
  }
  if (w.w.format != Format::f32) not_yet((std::string("linear on ") + format_name(w.w.format) + " weights").c_str());
  const float* dw = mirror_->device(reinterpret_cast<const float*>(w.w.data), size_t(w.rows() * w.cols()),
                                    w.w.name.c_str());
  cuda_linear_f32(dw, w.rows(), w.cols(), x.data, x.rows, y.data, stream_);
}

void CudaBackend::place_weights(const std::vector<StoreEntry>& entries, const StoreProgress& progress,
                                ThreadPool* pool) {
  if (store_) fail("cuda backend: the weights were placed already");
  cuda_set_device(device_);
  store_ = CudaWeightStore::load(entries, device_, kReserveBytes, progress, uint64_t(64) << 20, pool);
  // Where the ops look for them: by the stored bytes' address (and shape),
  // as mma_weights, expert_stack and the mirror key them.
  for (size_t i = 0; i < entries.size(); ++i) {
    const StoreEntry& e = entries[i];
    switch (e.layout) {
      case DeviceLayout::mma: {
        const WeightView& v = e.views.at(0);
        mma_.emplace(MmaKey{v.data, v.rows, v.cols}, mma_entry(store_->linear(i)));
        break;
      }
      case DeviceLayout::w4a16: stacks_.emplace(e.views.at(0).data, store_->experts(i)); break;
      case DeviceLayout::stored: mirror_->adopt(e.raw, size_t(e.raw_bytes), store_->stored(i)); break;
    }
  }
}

CudaBackend::MmaEntry CudaBackend::mma_entry(const MmaWeightsDevice& w) const {
  const int64_t chunks = w.cols_padded / mma::chunk_k(w.format == Format::fp8_block128);
  return MmaEntry{w, linear_mma_k_splits(w.rows_padded, chunks, sms_)};
}

const CudaBackend::MmaEntry& CudaBackend::mma_weights(const WeightView& w) {
  const MmaKey key{w.data, w.rows, w.cols};
  if (auto it = mma_.find(key); it != mma_.end()) return it->second;
  ++first_use_repacks_;
  const MmaMatrix m = repack_mma(w);  // throws naming the element for a NaN code or a bad scale
  MmaWeightsDevice d = mma_device_shape(m);
  auto* words = static_cast<uint8_t*>(alloc_->allocate(m.words.size()));
  owned_.push_back(words);
  alloc_->upload(words, m.words.data(), m.words.size());
  d.words = words;
  if (!m.scales.empty()) {
    auto* scales = static_cast<float*>(alloc_->allocate(m.scales.size() * sizeof(float)));
    owned_.push_back(scales);
    alloc_->upload(scales, m.scales.data(), m.scales.size() * sizeof(float));
    d.scales = scales;
  }
  return mma_.emplace(key, mma_entry(d)).first->second;
}

void CudaBackend::rope(const RopeTable& table, Tensor x, int64_t heads, std::span<const int64_t> positions,
                       bool inverse) {
  if (int64_t(positions.size()) != x.rows || heads <= 0 || x.cols % heads)
    fail("rope: ", positions.size(), " positions for [", x.rows, ", ", x.cols, "] in ", heads, " heads");
  const float* f = mirror_->device(table.inv_freq().data(), table.inv_freq().size(), "a RoPE frequency table");
  key(Launch::rope, x.rows);
  cuda_rope(f, table.rope_dim(), table.attention_factor(), x.data, x.rows, heads, x.cols / heads,
            upload_ints(positions), inverse, stream_);
}

void CudaBackend::gather_rows(Tensor x, std::span<const int64_t> rows, Tensor out) {
  if (out.rows != int64_t(rows.size()) || out.cols != x.cols)
    fail("gather_rows: ", rows.size(), " rows of ", x.cols, " into [", out.rows, ", ", out.cols, "]");
  for (int64_t r : rows)
    if (r < 0 || r >= x.rows) fail("gather_rows: row ", r, " outside [0, ", x.rows, ")");
  key(Launch::gather_rows, int64_t(rows.size()));
  cuda_gather_rows(x.data, x.cols, upload_ints(rows), int64_t(rows.size()), out.data, stream_);
}

void CudaBackend::add_to_streams(Tensor x, Tensor streams) {
  if (x.rows != streams.rows || x.cols <= 0 || streams.cols % x.cols != 0)
    fail("add_to_streams: [", x.rows, ", ", x.cols, "] does not broadcast over [", streams.rows, ", ", streams.cols, "]");
  key(Launch::add_to_streams, x.rows);
  cuda_add_to_streams(x.data, x.rows, x.cols, streams.cols / x.cols, streams.data, stream_);
}

void CudaBackend::add_bias(Tensor y, const float* bias) {
  key(Launch::add_bias, y.rows);
  cuda_add_bias(y.data, y.rows, y.cols, mirror_->device(bias, size_t(y.cols), "a bias"), stream_);
}

void CudaBackend::hc_pre(const HcWeights& w, const HcShape& s, Tensor streams, Tensor x, Tensor post, Tensor comb) {
  const int64_t N = s.streams, D = s.hidden, T = streams.rows, width = (2 + N) * N;
  if (streams.cols != N * D || x.rows != T || x.cols != D || post.rows != T || post.cols != N || comb.rows != T ||
      comb.cols != N * N || w.fn.rows() != width || w.fn.cols() != N * D || w.base.size() != size_t(width) ||
      w.scale.size() != 3)
    fail("hc_pre: streams [", T, ", ", streams.cols, "] of ", N, " x ", D, " do not fit its weights or outputs");
  key(Launch::hc_pre, T);
  const size_t m = mark();
  Tensor normed = alloc(T, N * D), mixes = alloc(T, width);
  cuda_rms_norm(streams.data, T, N * D, nullptr, float(s.rms_eps), normed.data, stream_);
  linear(w.fn, normed, mixes);
  HcDeviceParams p{N, D, s.sinkhorn_iters, s.hc_eps, mirror_->device(w.base.data(), w.base.size(), "hc base"),
                   mirror_->device(w.scale.data(), w.scale.size(), "hc scale")};
  cuda_hc_pre_finish(p, mixes.data, streams.data, T, x.data, post.data, comb.data, stream_);
  release_to(m);
}

void CudaBackend::hc_post(const HcShape& s, Tensor y, Tensor post, Tensor comb, Tensor streams) {
  const int64_t N = s.streams, D = s.hidden, T = streams.rows;
  if (streams.cols != N * D || y.rows != T || y.cols != D || post.rows != T || post.cols != N || comb.rows != T ||
      comb.cols != N * N)
    fail("hc_post: streams [", T, ", ", streams.cols, "] of ", N, " x ", D, " do not fit y, post, comb");
  key(Launch::hc_post, T);
  cuda_hc_post(N, D, y.data, post.data, comb.data, T, streams.data, stream_);
}

void CudaBackend::hc_head(const HcHeadWeights& w, const HcShape& s, Tensor streams, Tensor y) {
  const int64_t N = s.streams, D = s.hidden, T = streams.rows;
  if (streams.cols != N * D || y.rows != T || y.cols != D || w.fn.rows() != N || w.fn.cols() != N * D ||
      w.base.size() != size_t(N) || w.scale.size() != 1)
    fail("hc_head: streams [", T, ", ", streams.cols, "] of ", N, " x ", D, " do not fit its weights or y");
  key(Launch::hc_head, T);
  const size_t m = mark();
  Tensor normed = alloc(T, N * D), mixes = alloc(T, N);
  cuda_rms_norm(streams.data, T, N * D, nullptr, float(s.rms_eps), normed.data, stream_);
  linear(w.fn, normed, mixes);
  HcDeviceParams p{N, D, 0, s.hc_eps, mirror_->device(w.base.data(), w.base.size(), "hc_head base"),
                   mirror_->device(w.scale.data(), w.scale.size(), "hc_head scale")};
  cuda_hc_head_finish(p, mixes.data, streams.data, T, y.data, stream_);
  release_to(m);
}

void CudaBackend::grouped_wo_a(const BoundLinear& wo_a, const AttentionShape& s, Tensor o, Tensor y) {
  // As grouped_wo_a_cpu: group g's slice of the heads through rows
  // [g R, (g + 1) R) of wo_a, into columns [g R, (g + 1) R) of y.
  const int64_t G = s.o_groups, R = s.o_lora, T = o.rows, HD = s.heads * s.head_dim;
  if (G <= 0 || HD % G || o.cols != HD || y.rows != T || y.cols != G * R || wo_a.rows() != G * R ||
      wo_a.cols() != HD / G)
    fail("grouped_wo_a ", wo_a.w.name, ": o [", T, ", ", o.cols, "] in ", G, " groups -> y [", y.rows, ", ", y.cols,
         "] does not fit the weight [", wo_a.rows(), ", ", wo_a.cols(), "]");
  const int64_t Cg = HD / G;
  const size_t m = mark();
  Tensor xg = alloc(T, Cg), yg = alloc(T, R);
  // Every group on its row slice, or (FP8 tiles straddling groups) every
  // group on the whole matrix, keeping its rows: the weight store holds one
  // or the other (wo_a_group_slices).
  const std::vector<WeightView> slices = wo_a_group_slices(wo_a.w, s);
  Tensor full = slices.empty() ? alloc(T, G * R) : Tensor{};
  key(Launch::wo_a, slices.empty() ? -G : G);
  for (int64_t g = 0; g < G; ++g) {
    cuda_copy_cols(o.data, HD, g * Cg, xg.data, Cg, 0, T, Cg, stream_);
    if (!slices.empty()) {
      linear(BoundLinear{slices[size_t(g)], wo_a.fn}, xg, yg);
      cuda_copy_cols(yg.data, R, 0, y.data, G * R, g * R, T, R, stream_);
    } else {
      linear(wo_a, xg, full);
      cuda_copy_cols(full.data, G * R, g * R, y.data, G * R, g * R, T, R, stream_);
    }
  }
  release_to(m);
}

}  // namespace nibble
