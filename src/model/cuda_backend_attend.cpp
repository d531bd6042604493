// CudaBackend's DeepSeek-V4 attention ops: the per-sequence device cache
// (cuda_attention_cache.h) and attend, the GPU form of attend_cpu
// (deepseek_v4_attention.cpp) over it: the compressors' rows into their
// rings and every closing window pooled, normed and RoPE'd into an entry;
// the indexer's top-k over its own entries (CSA); the window keys gathered
// from the ring beside the new ones; each query's key list; the attention
// core with sinks; the new kv rows into the ring. All of it is launches on
// the backend's stream; the host inputs are the step's scalars and small
// position lists, uploaded into the arena.
#include <algorithm>
#include <cmath>

#include "device/cuda_memory.h"
#include "kernels/cuda/attention_sinks.h"
#include "kernels/cuda/attention_state.h"
#include "kernels/cuda/indexer_topk.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/cuda/row_ops.h"
#include "model/cuda_attention_cache.h"
#include "model/cuda_backend.h"
#include "util/error.h"

namespace nibble {

std::unique_ptr<AttentionCache> CudaBackend::new_attention_cache(const AttentionWeights& w, const AttentionShape& s) {
  return std::make_unique<DeviceAttentionCache>(*alloc_, &w, s);
}

void CudaBackend::append_compressed(DeviceAttentionCache& cache, DeviceCompressor& c, const CompressorWeights& w,
                                    const RopeTable& rope, double rms_eps, const float* kv, const float* score,
                                    int64_t n, int64_t p0) {
  const int64_t m = c.ratio, width = c.width, dim = c.dim;
  cache.reserve_entries(c, (p0 + n) / m);
  const float* ape = mirror_->device(w.ape.data(), w.ape.size(), "a compressor's ape");
  const float* norm = mirror_->device(w.norm.data(), w.norm.size(), "a compressor's norm");
  const float* inv_freq = mirror_->device(rope.inv_freq().data(), rope.inv_freq().size(), "a RoPE frequency table");
  // A step captured as a graph launches the same kernels whether or not a
  // window closes (a sequence closes one every m-th token; a batch's
  // sequences at different points would give every step another graph):
  // where none closes, the open window is pooled into a scratch row that
  // nothing reads. Its slot is taken either way, so the arena's slots stay
  // where they are.
  float* scratch = steady_launches() ? arena_->alloc(dim) : nullptr;
  // Pieces of at most kPiece rows: the rings hold a piece and the windows
  // before it that the piece's closing windows pool.
  for (int64_t t0 = 0; t0 < n; t0 += DeviceAttentionCache::kPiece) {
    const int64_t len = std::min(DeviceAttentionCache::kPiece, n - t0), pa = p0 + t0;
    cuda_ring_store(c.kv, c.ring_rows, width, kv + t0 * width, len, pa, 0, nullptr, 0, stream_);
    cuda_ring_store(c.score, c.ring_rows, width, score + t0 * width, len, pa, 0, ape, m, stream_);
    c.high = std::max(c.high, pa + len);
    // Windows [w0, w1) close in this piece.
    const int64_t w0 = pa / m, w1 = (pa + len) / m;
    const bool closes = w1 > w0;
    key(Launch::pool, closes || scratch ? 1 : 0);
    if (closes || scratch) {
      const int64_t count = closes ? w1 - w0 : 1;
      float* out = closes ? c.entries + w0 * dim : scratch;
      cuda_compressor_pool(c.kv, c.score, c.ring_rows, width, dim, m, c.overlap, w0, count, out, stream_);
      cuda_rms_norm(out, count, dim, norm, float(rms_eps), out, stream_);
      std::vector<int64_t> at(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k) at[size_t(k)] = (w0 + k) * m;
      cuda_rope(inv_freq, rope.rope_dim(), rope.attention_factor(), out, count, 1, dim,
                upload_ints(std::span<const int64_t>(at)), false, stream_);
    }
  }
}

void CudaBackend::attend(const AttentionWeights& w, const AttentionShape& s, const RopeTable& compress_rope,
                         const AttnSeq& seq, Tensor q, Tensor kv, Tensor comp_kv, Tensor comp_score,
                         const IndexerProjections* idx, Tensor o) {
  auto* cache = dynamic_cast<DeviceAttentionCache*>(seq.cache);
  if (!cache) fail("attend (cuda): the sequence's cache belongs to another backend than this CUDA backend's");
  const int64_t H = s.heads, d = s.head_dim, W = s.window, n = seq.count, p0 = seq.p0;
  if (&cache->weights() != &w) fail("attend (cuda): the sequence's cache was made for another layer");
  if (p0 != cache->position)
    fail("attend (cuda): the cache holds ", cache->position, " positions but the sequence is at ", p0);
  if (q.rows != n || q.cols != H * d || kv.rows != n || kv.cols != d || o.rows != n || o.cols != H * d)
    fail("attend (cuda): q [", q.rows, ", ", q.cols, "], kv [", kv.rows, ", ", kv.cols, "], o [", o.rows, ", ",
         o.cols, "] for ", n, " tokens of ", H, " heads of ", d);
  if ((w.compressor && (!comp_kv.data || !comp_score.data)) || (w.indexer && !idx))
    fail("attend (cuda): a compressed layer without its compressor's or indexer's projections");
  if (n == 0) return;
  const size_t mark0 = mark();
  key(Launch::attend, int64_t(w.kind));

  if (w.compressor) {
    const int64_t width = w.compressor->width();
    append_compressed(*cache, cache->comp, *w.compressor, compress_rope, s.rms_eps, comp_kv.data + seq.first * width,
                      comp_score.data + seq.first * width, n, p0);
  }
  // CSA: the indexer's own compressor, then each query's top-k of its entries.
  const int32_t* selected = nullptr;
  const int32_t* selected_counts = nullptr;
  int64_t topk = 0;
  if (w.indexer) {
    const IndexerWeights& iw = *w.indexer;
    const int64_t width = iw.compressor.width(), m = iw.compressor.ratio;
    append_compressed(*cache, cache->index, iw.compressor, compress_rope, s.rms_eps, idx->kv + seq.first * width,
                      idx->score + seq.first * width, n, p0);
    if (cache->index.n_entries(p0 + n) != cache->comp.n_entries(p0 + n))
      fail("CSA layer: indexer and compressor disagree on the number of windows");
    topk = iw.topk;
    std::vector<int32_t> visible(static_cast<size_t>(n));
    int64_t max_visible = 0;
    for (int64_t t = 0; t < n; ++t) {
      visible[size_t(t)] = int32_t(std::min((p0 + t + 1) / m, cache->index.n_entries(p0 + n)));
      max_visible = std::max<int64_t>(max_visible, visible[size_t(t)]);
    }
    auto* sel = reinterpret_cast<int32_t*>(arena_->alloc(n * topk));
    auto* counts = reinterpret_cast<int32_t*>(arena_->alloc(n));
    key(Launch::attend, max_visible > 0);
    if (max_visible > 0) {
      IndexerTopkArgs a;
      a.q = idx->q + seq.first * iw.heads * iw.dim;
      a.hw = idx->hw + seq.first * iw.heads;
      a.entries = cache->index.entries;
      a.visible = upload_ints(std::span<const int32_t>(visible));
      a.scores = arena_->alloc(n * max_visible);
      a.selected = sel;
      a.counts = counts;
      a.n = n;
      a.heads = iw.heads;
      a.dim = iw.dim;
      a.max_visible = max_visible;
      a.topk = topk;
      a.softmax_scale = 1.0f / std::sqrt(float(iw.dim));
      a.weights_scale = 1.0f / std::sqrt(float(iw.heads));
      a.stream = stream_;
      cuda_indexer_topk(a);
    } else {
      cuda_memset_async(counts, 0, size_t(n) * sizeof(int32_t), stream_);
    }
    selected = sel;
    selected_counts = counts;
  }

  // The window keys in position order: the ring's last W - 1 rows before p0,
  // then the new ones.
  const int64_t first = std::max<int64_t>(0, p0 - (W - 1)), n_old = p0 - first;
  float* keys = arena_->alloc((n_old + n) * d);
  key(Launch::attend, n_old > 0);
  cuda_ring_load(cache->ring, cache->ring_rows, d, first, n_old, keys, stream_);
  cuda_copy_async(keys + n_old * d, kv.data, size_t(n * d) * sizeof(float), stream_);

  // Each query's keys: its window, then HCA's visible entries or CSA's top-k.
  const int mode = w.kind == AttnKind::hca ? 1 : w.kind == AttnKind::csa ? 2 : 0;
  const int64_t n_entries = w.compressor ? cache->comp.n_entries(p0 + n) : 0;
  const int64_t max_keys = W + (mode == 1 ? n_entries : mode == 2 ? topk : 0);
  auto* key_lists = reinterpret_cast<int32_t*>(arena_->alloc(n * max_keys));
  auto* key_counts = reinterpret_cast<int32_t*>(arena_->alloc(n));
  cuda_attention_key_lists(n, p0, first, W, mode, w.compressor ? w.compressor->ratio : 0, n_entries, selected,
                           selected_counts, std::max<int64_t>(topk, 1), max_keys, key_lists, key_counts, stream_);

  AttentionSinksArgs a;
  a.q = q.data;
  a.ring = keys;
  a.entries = w.compressor ? cache->comp.entries : nullptr;
  a.keys = key_lists;
  a.counts = key_counts;
  a.sinks = mirror_->device(w.sink.data(), w.sink.size(), "attention sinks");
  a.logits = arena_->alloc(n * H * max_keys);
  a.o = o.data;
  a.n = n;
  a.heads = H;
  a.dim = d;
  a.max_keys = max_keys;
  a.scale = 1.0f / std::sqrt(float(d));
  a.stream = stream_;
  cuda_attention_sinks(a);

  // The newest kv rows for the next step's window (only the last ring_rows
  // of a long chunk survive, as on the CPU).
  cuda_ring_store(cache->ring, cache->ring_rows, d, kv.data, n, p0, std::max<int64_t>(0, n - cache->ring_rows),
                  nullptr, 0, stream_);
  cache->ring_high = std::max(cache->ring_high, p0 + n);
  cache->position = p0 + n;
  release_to(mark0);
}

}  // namespace nibble
