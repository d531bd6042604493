#include "model/deepseek_v4_store.h"

#include <set>
#include <tuple>

#include "model/deepseek_v4_attention.h"
#include "util/error.h"

namespace nibble {

namespace {

// Collects entries, each matrix once (keyed as CudaBackend finds them: the
// stored bytes' address and the shape).
class EntryList {
 public:
  // A matrix a linear op multiplies.
  void linear(const WeightView& v) {
    if (!v.data || !first_time(v.data, v.rows, v.cols)) return;
    if (v.format == Format::fp8_block128 || v.format == Format::bf16) {
      StoreEntry e;
      e.name = v.name;
      e.layout = DeviceLayout::mma;
      e.views.push_back(v);
      entries_.push_back(std::move(e));
    } else if (v.format == Format::f32) {
      // cuda_linear_f32 reads the stored floats (the backend's mirror finds
      // them by address).
      stored(v);
    } else {
      fail(v.name, ": a ", format_name(v.format), " linear has no CUDA kernel (FP8 block-128, BF16 and F32 do)");
    }
  }

  // The embedding table: its rows are copied out by id, as stored.
  void table(const WeightView& v) {
    if (!v.data || !first_time(v.data, v.rows, v.cols)) return;
    if (v.format != Format::f32 && v.format != Format::bf16)
      fail(v.name, ": a ", format_name(v.format), " embedding table is not on the GPU (F32 and BF16 are)");
    stored(v);
  }

  // One projection of every routed expert of a layer, as one stack.
  void experts(const MoeWeights& m, const WeightView ExpertWeights::*proj) {
    if (m.experts.empty()) return;
    const WeightView& v0 = m.experts.front().*proj;
    if (!v0.data || !first_time(v0.data, v0.rows, v0.cols)) return;
    StoreEntry e;
    e.name = v0.name + " .. " + (m.experts.back().*proj).name;
    e.layout = DeviceLayout::w4a16;
    for (const ExpertWeights& x : m.experts) e.views.push_back(x.*proj);
    entries_.push_back(std::move(e));
  }

  std::vector<StoreEntry> take() { return std::move(entries_); }

 private:
  // An F32 or BF16 matrix as its stored bytes (no scales: bytes() is all data).
  void stored(const WeightView& v) {
    StoreEntry e;
    e.name = v.name;
    e.layout = DeviceLayout::stored;
    e.raw = v.data;
    e.raw_bytes = v.bytes();
    entries_.push_back(std::move(e));
  }

  bool first_time(const void* data, int64_t rows, int64_t cols) { return seen_.insert({data, rows, cols}).second; }

  std::vector<StoreEntry> entries_;
  std::set<std::tuple<const void*, int64_t, int64_t>> seen_;
};

void add_compressor(EntryList& list, const CompressorWeights& c) {
  list.linear(c.wkv.w);
  list.linear(c.wgate.w);
}

// One block: the order of block_forward's ops.
void add_block(EntryList& list, const BlockWeights& b, const AttentionShape& s) {
  list.linear(b.hc_attn.fn.w);
  const AttentionWeights& a = b.attn;
  list.linear(a.wq_a.w);
  list.linear(a.wq_b.w);
  list.linear(a.wkv.w);
  if (a.compressor) add_compressor(list, *a.compressor);
  if (a.indexer) {
    add_compressor(list, a.indexer->compressor);
    list.linear(a.indexer->wq_b.w);
    list.linear(a.indexer->weights_proj.w);
  }
  // grouped_wo_a's groups: their row slices, or the whole matrix.
  const std::vector<WeightView> slices = wo_a_group_slices(a.wo_a.w, s);
  for (const WeightView& v : slices) list.linear(v);
  if (slices.empty()) list.linear(a.wo_a.w);
  list.linear(a.wo_b.w);
  list.linear(b.hc_ffn.fn.w);
  const MoeWeights& m = b.moe;
  list.linear(m.gate);
  list.linear(b.router.w);
  list.experts(m, &ExpertWeights::w1);
  list.experts(m, &ExpertWeights::w3);
  list.experts(m, &ExpertWeights::w2);
  if (m.has_shared) {
    list.linear(m.shared.w1);
    list.linear(m.shared.w3);
    list.linear(m.shared.w2);
  }
}

}  // namespace

std::vector<StoreEntry> deepseek_v4_store_entries(const DeepseekV4Weights& w, const AttentionShape& s) {
  EntryList list;
  list.table(w.embed);
  for (const BlockWeights& b : w.layers) add_block(list, b, s);
  list.linear(w.hc_head.fn.w);
  list.linear(w.head.w);
  for (const MtpWeights& m : w.mtp) {
    list.linear(m.e_proj.w);
    list.linear(m.h_proj.w);
    add_block(list, m.block, s);
    list.linear(m.hc_head.fn.w);
  }
  return list.take();
}

}  // namespace nibble
