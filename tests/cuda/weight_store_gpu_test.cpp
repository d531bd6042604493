// The CUDA weight store on a GPU: the device bytes after CudaWeightStore::
// load (pinned staging, async copies) equal, byte for byte, what the host
// upload puts in a host fake's memory (weight_store_test.cpp proves those
// bytes right); the kernels' views of the entries point at their parts; a model larger than
// the device is refused naming the sizes. Skipped, saying why, without a
// CUDA device.
#include <gtest/gtest.h>

#include <cstring>

#include "device/cuda_device.h"
#include "format/element.h"
#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/cuda/weight_store.h"
#include "kernels/cuda/weight_store_cuda.h"
#include "kernels/random_weights.h"
#include "util/error.h"
#include "support/cuda_test.h"

namespace nibble {
namespace {

class HostTarget final : public StoreTarget {
 public:
  std::string name() const override { return "host"; }
  void memory(uint64_t* f, uint64_t* t) override { *f = *t = uint64_t(1) << 40; }
  uint8_t* allocate(uint64_t bytes) override {
    arena.assign(bytes, 0);
    return arena.data();
  }
  uint8_t* staging(int i, uint64_t bytes) override {
    buf[i].resize(bytes);
    return buf[i].data();
  }
  void copy_async(int i, uint8_t* dst, uint64_t n) override { std::memcpy(dst, buf[i].data(), n); }
  void wait(int) override {}
  void finish() override {}
  std::vector<uint8_t> arena, buf[2];
};

TEST(WeightStoreGpu, DeviceBytesEqualTheHostUpload) {
  REQUIRE_CUDA_DEVICE();
  std::vector<OwnedWeights> owned;
  owned.push_back(random_weights(Format::nvfp4, 2048, 4096, 1));
  owned.push_back(random_weights(Format::nvfp4, 2048, 4096, 2));
  owned.push_back(random_weights(Format::fp8_block128, 1000, 4100, 3));
  owned.push_back(random_weights(Format::bf16, 4097, 300, 4));
  std::vector<StoreEntry> entries(3);
  entries[0] = {"experts.w1", DeviceLayout::w4a16, {owned[0].view, owned[1].view}, nullptr, 0};
  entries[1] = {"attn.wq_a", DeviceLayout::mma, {owned[2].view}, nullptr, 0};
  entries[2] = {"head", DeviceLayout::mma, {owned[3].view}, nullptr, 0};
  uint64_t last = 0;
  // 1 MiB staging: dozens of pieces through both buffers.
  auto store = CudaWeightStore::load(entries, 0, 0, [&](uint64_t d, uint64_t) { last = d; }, uint64_t(1) << 20);
  HostTarget host;
  const StoreUpload up = upload_weight_store(entries, host, 0, uint64_t(1) << 20);
  const std::vector<uint8_t> dev = store->download();
  ASSERT_EQ(dev.size(), host.arena.size());
  for (size_t e = 0; e < entries.size(); ++e)
    for (const StorePart& p : up.plan.entries[e].parts)
      EXPECT_EQ(std::memcmp(dev.data() + p.offset, host.arena.data() + p.offset, p.bytes), 0) << entries[e].name;
  EXPECT_GT(last, 0u);

  // The kernels' views point at the planned parts with the layouts' shapes.
  const MmaWeightsDevice w = store->linear(1);
  const MmaMatrix m = repack_mma(owned[2].view);
  EXPECT_EQ(w.rows, m.rows);
  EXPECT_EQ(w.cols_padded, m.cols_padded);
  EXPECT_EQ(w.col_blocks, m.col_blocks);
  EXPECT_EQ(w.words, store->upload().part(1, 0));
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(w.scales), store->upload().part(1, 1));
  const W4A16ExpertsDevice x = store->experts(0);
  EXPECT_EQ(x.experts, 2);
  EXPECT_EQ(x.cols_padded, 4096);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(x.global_scales), store->upload().part(0, 2));
  EXPECT_THROW(store->linear(0), Error);
}

TEST(WeightStoreGpu, ADeviceTooSmallIsRefusedWithTheSizes) {
  REQUIRE_CUDA_DEVICE();
  OwnedWeights w = random_weights(Format::bf16, 16, 16, 1);
  std::vector<StoreEntry> entries(1);
  entries[0] = {"head", DeviceLayout::mma, {w.view}, nullptr, 0};
  const uint64_t huge = cuda_probe().devices[0].memory_bytes;  // the reserve alone cannot fit
  try {
    CudaWeightStore::load(entries, 0, huge);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
