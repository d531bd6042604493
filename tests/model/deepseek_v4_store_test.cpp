// deepseek_v4_store_entries: the weights a DeepSeek-V4 forward uploads to a
// GPU at load. Checked against the checkpoint's own tensor table (detection),
// not against the weights struct the list is built from: every matrix of the
// checkpoint a CUDA kernel reads is held exactly once, nothing else is, and
// the store's bytes are what `explain --device` computes per tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "fixture_util.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_store.h"
#include "model/deepseek_v4_weights.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/cuda/w4a16_repack.h"
#include "model/registry.h"
#include "support/fake_store_target.h"

namespace nibble {
namespace {

struct Bound {
  std::unique_ptr<Checkpoint> ck;
  Detection det;
  Plan plan;
  DeepseekV4Config cfg;
  DeepseekV4Weights w;
  AttentionShape shape;
};

// The model as DeepseekV4Model binds it for a GPU (sm_90: the planner's
// CUDA kernels; binding does not need the GPU itself).
Bound bind_for_gpu(const std::string& dir) {
  Bound b;
  b.ck = Checkpoint::open(dir);
  b.det = detect_formats(*b.ck);
  b.plan = plan_model(*b.ck, b.det, named_device("sm_90", 1, 1.0), PlanOptions{});
  b.cfg = parse_deepseek_v4_config(b.ck->config(), b.ck->file_path("config.json"));
  b.w = bind_deepseek_v4_weights(*b.ck, b.det, b.plan, b.cfg, LoadOptions{});
  b.shape = deepseek_v4_attention_shape(b.cfg, 16);
  return b;
}

// Bytes of a matrix's codes (scales apart), from the format's definition.
uint64_t data_bytes(const WeightView& v) {
  switch (v.format) {
    case Format::mxfp4:
    case Format::nvfp4:
    case Format::int4: return uint64_t(v.rows * v.cols / 2);
    case Format::fp8_block128: return uint64_t(v.rows * v.cols);
    case Format::bf16: return uint64_t(v.rows * v.cols) * 2;
    default: return uint64_t(v.rows * v.cols) * 4;
  }
}

struct Range {
  const uint8_t* first;
  const uint8_t* second;
  std::string name;
  bool operator<(const Range& o) const { return first < o.first; }
};

// Every byte range the entries hold, sorted.
std::vector<Range> held_ranges(const std::vector<StoreEntry>& entries) {
  std::vector<Range> r;
  for (const StoreEntry& e : entries) {
    if (e.layout == DeviceLayout::stored) r.push_back({e.raw, e.raw + e.raw_bytes, e.name});
    for (const WeightView& v : e.views) r.push_back({v.data, v.data + data_bytes(v), v.name});
  }
  std::sort(r.begin(), r.end());
  return r;
}

class DeepseekV4Store : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV4Store, HoldsEveryMatrixAKernelReadsOnce) {
  const Bound b = bind_for_gpu(GetParam());
  const std::vector<StoreEntry> entries = deepseek_v4_store_entries(b.w, b.shape);
  ASSERT_FALSE(entries.empty());

  // No byte is held twice (two entries would upload it twice).
  const std::vector<Range> held = held_ranges(entries);
  for (size_t i = 1; i < held.size(); ++i)
    ASSERT_LE(held[i - 1].second, held[i].first) << held[i - 1].name << " and " << held[i].name << " overlap";

  // What must be there: every matrix of the checkpoint (is_matrix: what the
  // planner puts on a kernel), the embedding table and the hyper-connection
  // mixes (F32 [mixes, N D] matrices the planner leaves to the model's
  // elementwise math, which the GPU multiplies on cuda_linear_f32).
  std::map<const uint8_t*, std::pair<const uint8_t*, std::string>> wanted;  // start -> (end, name)
  for (const DetectedTensor& t : b.det.tensors) {
    const bool embed = t.name == "embed";
    const bool hc_mix = t.name.size() > 3 && t.name.compare(t.name.size() - 3, 3, "_fn") == 0;
    if (!t.is_matrix && !embed && !hc_mix) continue;
    const TensorInfo& p = *t.parts.at(0);
    wanted[p.data] = {p.data + p.nbytes, t.name};
  }
  ASSERT_FALSE(wanted.empty());

  // Each held range lies inside one wanted tensor, and together they cover
  // each wanted tensor end to end.
  std::map<const uint8_t*, const uint8_t*> covered_to;  // tensor start -> how far covered so far
  for (const Range& r : held) {
    auto it = wanted.upper_bound(r.first);
    ASSERT_NE(it, wanted.begin()) << r.name << ": bytes of no checkpoint matrix";
    --it;
    ASSERT_LE(r.second, it->second.first) << r.name << " runs past " << it->second.second;
    const uint8_t*& to = covered_to.try_emplace(it->first, it->first).first->second;
    EXPECT_EQ(r.first, to) << it->second.second << ": a gap in what the entries hold";
    to = r.second;
  }
  for (const auto& [start, end_name] : wanted) {
    auto c = covered_to.find(start);
    EXPECT_TRUE(c != covered_to.end() && c->second == end_name.first)
        << end_name.second << " is not (wholly) in the weight store";
  }

  // The store's bytes are explain's per-tensor device bytes of the same
  // tensors (plan.cpp: cuda_layout_bytes per detected tensor).
  uint64_t explain_bytes = 0;
  for (const DetectedTensor& t : b.det.tensors)
    if (wanted.count(t.parts.at(0)->data))
      explain_bytes += cuda_layout_bytes(t.format, t.is_matrix, t.rows, t.cols, t.bytes);
  const StorePlan sp = plan_weight_store(entries);
  uint64_t store_bytes = 0;
  for (const StoreEntryPlan& e : sp.entries) store_bytes += e.bytes();
  EXPECT_EQ(store_bytes, explain_bytes);
}

TEST_P(DeepseekV4Store, StacksEachLayersExpertsPerProjection) {
  const Bound b = bind_for_gpu(GetParam());
  const std::vector<StoreEntry> entries = deepseek_v4_store_entries(b.w, b.shape);
  // Three stacks per block (main layers and MTP layers), each of every
  // routed expert, from the config.
  int64_t stacks = 0;
  for (const StoreEntry& e : entries) {
    if (e.layout != DeviceLayout::w4a16) continue;
    ++stacks;
    EXPECT_EQ(int64_t(e.views.size()), b.cfg.n_experts) << e.name;
  }
  EXPECT_EQ(stacks, 3 * (b.cfg.n_layers + int64_t(b.w.mtp.size())));
}

// The entries upload as they are (a host fake of the GPU): each matrix's
// part holds what its kernel's repacker makes of it, bitwise, and the raw
// entries their stored bytes, with no copy out of bounds and no buffer
// refilled while its copy was pending.
TEST_P(DeepseekV4Store, UploadsEachEntryAsItsKernelsRepackerMakesIt) {
  const Bound b = bind_for_gpu(GetParam());
  const std::vector<StoreEntry> entries = deepseek_v4_store_entries(b.w, b.shape);
  test::FakeTarget t(uint64_t(1) << 34, uint64_t(1) << 34);
  uint64_t done = 0, total = 0;
  // Small staging buffers: a fixture's entries take many turns of both.
  const StoreUpload up = upload_weight_store(entries, t, 0, uint64_t(64) << 10,
                                             [&](uint64_t d, uint64_t n) { done = d, total = n; });
  EXPECT_EQ(t.out_of_bounds, 0);
  EXPECT_EQ(t.refills_while_pending, 0);
  EXPECT_EQ(done, total);
  auto part = [&](size_t e, size_t p) { return t.arena.data() + up.plan.entries[e].parts[p].offset; };
  for (size_t i = 0; i < entries.size(); ++i) {
    const StoreEntry& e = entries[i];
    SCOPED_TRACE(e.name);
    if (e.layout == DeviceLayout::stored) {
      EXPECT_EQ(std::memcmp(part(i, 0), e.raw, e.raw_bytes), 0);
    } else if (e.layout == DeviceLayout::mma) {
      const MmaMatrix m = repack_mma(e.views.at(0));
      EXPECT_EQ(std::memcmp(part(i, 0), m.words.data(), m.words.size()), 0);
      if (!m.scales.empty()) {  // BF16 has none (and a null data())
        EXPECT_EQ(std::memcmp(part(i, 1), m.scales.data(), m.scales.size() * 4), 0);
      }
    } else {
      for (size_t v = 0; v < e.views.size(); ++v) {
        const W4A16Matrix m = repack_w4a16(e.views[v]);
        const StoreEntryPlan& p = up.plan.entries[i];
        EXPECT_EQ(std::memcmp(part(i, 0) + v * p.parts[0].per_view, m.words.data(), m.words.size() * 4), 0) << v;
        EXPECT_EQ(std::memcmp(part(i, 1) + v * p.parts[1].per_view, m.scales.data(), m.scales.size()), 0) << v;
        EXPECT_EQ(std::memcmp(part(i, 2) + v * 4, &m.global_scale, 4), 0) << v;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeepseekV4Store,
                         ::testing::Values(test::fixture_dir("flash_tiny_stock"), test::fixture_dir("flash_tiny_nvfp4"),
                                           test::source_dir() + "/models/dsv4-tiny"),
                         [](const auto& info) { return std::to_string(info.index); });

}  // namespace
}  // namespace nibble
