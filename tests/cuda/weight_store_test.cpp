// The weight store's host side on the CPU, against a host fake of the
// device (weight_store.h's StoreTarget):
//  - every layout arrives bitwise: the fake device's bytes, read back
//    through the repackers' inverses, are the stored bytes; raw entries are
//    copied as they are;
//  - the double buffering is real: the fake performs each copy only when the
//    uploader waits for that buffer (as an async DMA may), so refilling a
//    buffer before its copy finished would deliver the wrong bytes, and the
//    fake also counts any such refill;
//  - sizes match the layouts' arithmetic, done here from the definitions;
//  - a model that does not fit is refused before any allocation, staging
//    buffer or copy, with the sizes in the message.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "device/cuda_device.h"
#include "format/element.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/cuda/weight_store.h"
#include "kernels/cuda/weight_store_cuda.h"
#include "kernels/random_weights.h"
#include "support/fake_store_target.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

using test::FakeTarget;

struct Model {
  std::vector<OwnedWeights> owned;
  std::vector<uint8_t> raw;
  std::vector<StoreEntry> entries;
};

// Every layout, stacks and single matrices, awkward shapes.
Model make_model() {
  Model m;
  m.owned.reserve(16);
  auto stack = [&](const char* name, Format f, int64_t rows, int64_t cols, int count, DeviceLayout layout,
                   Fp8ScaleType st = Fp8ScaleType::ue8m0) {
    StoreEntry e;
    e.name = name;
    e.layout = layout;
    for (int i = 0; i < count; ++i) {
      m.owned.push_back(random_weights(f, rows, cols, uint64_t(1000 + m.owned.size()), st));
      m.owned.back().view.name = std::string(name) + "." + std::to_string(i);
      e.views.push_back(m.owned.back().view);
    }
    m.entries.push_back(e);
  };
  stack("experts.w1", Format::mxfp4, 40, 96, 3, DeviceLayout::w4a16);
  stack("experts.w2", Format::nvfp4, 17, 48, 2, DeviceLayout::w4a16);
  stack("attn.wq_a", Format::fp8_block128, 130, 200, 1, DeviceLayout::mma);
  stack("attn.wkv", Format::fp8_block128, 33, 129, 1, DeviceLayout::mma, Fp8ScaleType::f32);
  stack("head", Format::bf16, 19, 40, 1, DeviceLayout::mma);
  stack("experts.w3", Format::int4, 17, 96, 2, DeviceLayout::w4a16);  // Kimi K2's experts (w4a16_int4.h)
  m.raw.resize(1001);
  for (size_t i = 0; i < m.raw.size(); ++i) m.raw[i] = uint8_t(i * 7 + 3);
  StoreEntry norm;
  norm.name = "norm";
  norm.raw = m.raw.data();
  norm.raw_bytes = m.raw.size();
  m.entries.push_back(norm);
  return m;
}

const uint8_t* at(const FakeTarget& t, const StoreUpload& up, size_t e, size_t p) {
  return t.arena.data() + up.plan.entries[e].parts[p].offset;
}

class WeightStoreUpload : public ::testing::TestWithParam<int> {};

TEST_P(WeightStoreUpload, EveryLayoutBitExactThroughTwoBuffers) {
  Model model = make_model();
  FakeTarget t(uint64_t(1) << 30, uint64_t(1) << 30);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  // Param: repack threads (0: none). 8 KiB staging: the widest strip (FP8,
  // 224 padded columns x 16 rows = 3.5 KiB) fits twice, and every entry
  // takes several pieces.
  std::unique_ptr<ThreadPool> pool = GetParam() ? std::make_unique<ThreadPool>(GetParam()) : nullptr;
  StoreUpload up = upload_weight_store(
      model.entries, t, 0, 8192, [&](uint64_t d, uint64_t total) { progress.emplace_back(d, total); }, pool.get());
  EXPECT_EQ(t.allocations, 1);
  EXPECT_EQ(t.refills_while_pending, 0);
  EXPECT_EQ(t.out_of_bounds, 0);
  EXPECT_EQ(t.finishes, 1);
  EXPECT_GT(t.copies, 20);

  for (size_t e = 0; e < model.entries.size(); ++e) {
    const StoreEntry& entry = model.entries[e];
    const auto& parts = up.plan.entries[e].parts;
    for (size_t v = 0; v < entry.views.size(); ++v) {
      const WeightView& w = entry.views[v];
      SCOPED_TRACE(w.name);
      if (entry.layout == DeviceLayout::w4a16) {
        W4A16Matrix m = repack_w4a16(w);  // its shape; the bytes come from the fake device
        std::memcpy(m.words.data(), at(t, up, e, 0) + v * parts[0].per_view, m.words.size() * 4);
        std::memcpy(m.scales.data(), at(t, up, e, 1) + v * parts[1].per_view, m.scales.size());
        std::vector<uint8_t> packed, scales;
        unpack_w4a16(m, packed, scales);
        EXPECT_EQ(std::memcmp(packed.data(), w.data, packed.size()), 0);
        EXPECT_EQ(std::memcmp(scales.data(), w.scales, scales.size()), 0);
        float gs;
        std::memcpy(&gs, at(t, up, e, 2) + 4 * v, 4);
        EXPECT_EQ(gs, w.format == Format::nvfp4 ? w.global_scale : 1.0f);
      } else {
        MmaMatrix m = repack_mma(w);
        std::memcpy(m.words.data(), at(t, up, e, 0) + v * parts[0].per_view, m.words.size());
        std::vector<uint8_t> data;
        unpack_mma(m, data);
        EXPECT_EQ(std::memcmp(data.data(), w.data, data.size()), 0);
        // The padding too is written (zeros), not left as the arena's 0xCD.
        const MmaMatrix ref = repack_mma(w);
        EXPECT_EQ(std::memcmp(at(t, up, e, 0) + v * parts[0].per_view, ref.words.data(), ref.words.size()), 0);
        if (w.format == Format::fp8_block128) {
          const int64_t blocks = ((w.rows + 127) / 128) * ((w.cols + 127) / 128);
          for (int64_t i = 0; i < blocks; ++i) {
            float got, want;
            std::memcpy(&got, at(t, up, e, 1) + 4 * i, 4);
            if (w.fp8_scale == Fp8ScaleType::ue8m0) want = ue8m0_decode(w.scales[i]);
            else std::memcpy(&want, w.scales + 4 * i, 4);
            EXPECT_EQ(got, want) << "scale " << i;
          }
        }
      }
    }
    if (entry.layout == DeviceLayout::stored) {
      EXPECT_EQ(std::memcmp(at(t, up, e, 0), model.raw.data(), model.raw.size()), 0);
    }
  }
  // Progress: increasing, ending at the sum of the parts.
  uint64_t sum = 0;
  for (const auto& ep : up.plan.entries) sum += ep.bytes();
  ASSERT_FALSE(progress.empty());
  for (size_t i = 1; i < progress.size(); ++i) EXPECT_GT(progress[i].first, progress[i - 1].first);
  EXPECT_EQ(progress.back().first, sum);
  EXPECT_EQ(progress.back().second, sum);
  EXPECT_EQ(t.copied, sum);
}

INSTANTIATE_TEST_SUITE_P(Threads, WeightStoreUpload, ::testing::Values(0, 3));

TEST(WeightStore, SizesFollowTheLayouts) {
  Model model = make_model();
  StorePlan plan = plan_weight_store(model.entries);
  uint64_t end = 0;
  for (size_t e = 0; e < model.entries.size(); ++e) {
    const StoreEntry& entry = model.entries[e];
    for (const StorePart& p : plan.entries[e].parts) {
      EXPECT_EQ(p.offset % 256, 0u) << entry.name;
      EXPECT_GE(p.offset, end) << entry.name << ": parts overlap";
      end = p.offset + p.bytes;
    }
    // From the layout definitions: W4A16 rows to 16, columns to 64, half a
    // byte per element plus a scale code per group (INT4: a BF16 per 32)
    // plus an f32 global scale; mma rows to 16, columns to 32 (FP8, 1 byte) or 16 (BF16, 2),
    // plus f32 scales per 128x128 tile.
    uint64_t want = 0;
    for (const WeightView& w : entry.views) {
      const uint64_t rp = uint64_t((w.rows + 15) / 16 * 16);
      uint64_t one;
      if (entry.layout == DeviceLayout::w4a16) {
        const uint64_t cp = uint64_t((w.cols + 63) / 64 * 64);
        one = rp * cp / 2 + (w.format == Format::int4 ? rp * cp / 32 * 2 : rp * cp / (w.format == Format::mxfp4 ? 32 : 16)) + 4;
      } else if (w.format == Format::fp8_block128) {
        one = rp * uint64_t((w.cols + 31) / 32 * 32) + uint64_t((w.rows + 127) / 128 * ((w.cols + 127) / 128)) * 4;
      } else {
        one = rp * uint64_t((w.cols + 15) / 16 * 16) * 2;
      }
      EXPECT_EQ(cuda_layout_bytes(w.format, true, w.rows, w.cols, w.bytes()), one) << w.name;
      want += one;
    }
    if (entry.layout == DeviceLayout::stored) want = entry.raw_bytes;
    EXPECT_EQ(plan.entries[e].bytes(), want) << entry.name;
  }
  EXPECT_GE(plan.total_bytes, end);
  EXPECT_LT(plan.total_bytes, end + 256);
  // Not a matrix, or a format without a CUDA layout: the stored bytes.
  EXPECT_EQ(cuda_layout_bytes(Format::f32, false, 1, 7168, 28672), 28672u);
  EXPECT_EQ(cuda_layout_for(Format::f32, true), DeviceLayout::stored);
  EXPECT_EQ(cuda_layout_for(Format::nvfp4, true), DeviceLayout::w4a16);
  EXPECT_EQ(cuda_layout_for(Format::int4, true), DeviceLayout::w4a16);
  EXPECT_EQ(cuda_layout_for(Format::bf16, true), DeviceLayout::mma);
  EXPECT_EQ(cuda_layout_for(Format::bf16, false), DeviceLayout::stored);
}

TEST(WeightStore, RefusesAModelThatDoesNotFitBeforeCopyingAnything) {
  Model model = make_model();
  const StorePlan plan = plan_weight_store(model.entries);
  const uint64_t reserve = 1000;
  // One byte short, counting the reserve.
  FakeTarget t(plan.total_bytes + reserve - 1, uint64_t(80) << 30);
  try {
    upload_weight_store(model.entries, t, reserve, 4096);
    ADD_FAILURE() << "a model that does not fit was uploaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("does not fit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(plan.total_bytes) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("80.00 GiB"), std::string::npos) << msg;  // the device's total
    EXPECT_NE(msg.find("nothing was copied"), std::string::npos) << msg;
    EXPECT_NE(msg.find("attn.wq_a"), std::string::npos) << msg;  // the largest entry
  }
  EXPECT_EQ(t.allocations, 0);
  EXPECT_EQ(t.staging_calls, 0);
  EXPECT_EQ(t.copies, 0);
  // Exactly enough fits.
  FakeTarget fits(plan.total_bytes + reserve, uint64_t(80) << 30);
  EXPECT_NO_THROW(upload_weight_store(model.entries, fits, reserve, 4096));
  EXPECT_EQ(fits.allocations, 1);
}

TEST(WeightStore, RefusesBadEntriesNamingThem) {
  Model model = make_model();
  auto expect_error = [](const std::vector<StoreEntry>& entries, uint64_t staging, const std::string& what) {
    FakeTarget t(uint64_t(1) << 30, uint64_t(1) << 30);
    try {
      upload_weight_store(entries, t, 0, staging);
      ADD_FAILURE() << "accepted; expected an error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_EQ(t.copies, 0);
  };
  // A strip wider than the staging buffers.
  expect_error(model.entries, 1024, "smaller than one 16-row strip of attn.wq_a");
  // A stack of two shapes.
  std::vector<StoreEntry> mixed = model.entries;
  mixed[0].views.push_back(model.entries[1].views[0]);
  expect_error(mixed, 4096, "experts.w2.0");
  // A layout that does not take the format.
  std::vector<StoreEntry> wrong = model.entries;
  wrong[2].layout = DeviceLayout::w4a16;
  expect_error(wrong, 4096, "the w4a16 layout does not take fp8_block128");
}

TEST(WeightStore, CudaLoadNeedsADevice) {
  // Without a device (or without CUDA) the CUDA store says why; with one
  // it holds the model at the planned size.
  Model model = make_model();
  if (cuda_probe().devices.empty()) {
    try {
      CudaWeightStore::load(model.entries, 0, 0);
      ADD_FAILURE() << "loaded without a device";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("without CUDA") != std::string::npos || msg.find("cuda:0") != std::string::npos) << msg;
    }
  } else {
    auto store = CudaWeightStore::load(model.entries, 0, 0);
    EXPECT_EQ(store->bytes(), plan_weight_store(model.entries).total_bytes);
  }
}

}  // namespace
}  // namespace nibble
