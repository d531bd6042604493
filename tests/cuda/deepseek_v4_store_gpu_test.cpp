// CudaBackend::place_weights on a real GPU: a DeepSeek-V4 fixture's weights
// uploaded at load (model/deepseek_v4_store.h), then every linear, grouped
// output projection and MoE of the model run on the backend without
// repacking anything on first use (first_use_repacks() stays 0), and each
// placed linear's output is its matrix times x: against a double dot of the
// dequantized weights within 2^-8 sum |w x| (x rounded once to BF16, 2^-9,
// plus the f32 accumulation). Whole-model logits through the Engine, which
// places its weights the same way, are deepseek_v4_gpu_test.cpp's.
// Skipped, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/detect.h"
#include "kernels/random_weights.h"
#include "model/cuda_backend.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_store.h"
#include "model/deepseek_v4_weights.h"
#include "model/fixture_util.h"
#include "model/registry.h"
#include "support/cuda_test.h"
#include "util/error.h"

namespace nibble {
namespace {

TEST(DeepseekV4StoreGpu, PlacedWeightsServeEveryOpWithoutRepacking) {
  REQUIRE_CUDA_DEVICE();
  for (const char* fixture : {"flash_tiny_stock", "flash_tiny_nvfp4"}) {
    SCOPED_TRACE(fixture);
    auto ck = Checkpoint::open(test::fixture_dir(fixture));
    const Detection det = detect_formats(*ck);
    const Plan plan = plan_model(*ck, det, named_device("cuda", 1, 1.0), PlanOptions{});
    const DeepseekV4Config c = parse_deepseek_v4_config(ck->config(), ck->file_path("config.json"));
    const DeepseekV4Weights w = bind_deepseek_v4_weights(*ck, det, plan, c, LoadOptions{});
    const AttentionShape s = deepseek_v4_attention_shape(c, 16);
    const std::vector<StoreEntry> entries = deepseek_v4_store_entries(w, s);

    CudaBackend gpu;
    uint64_t done = 0, total = 0;
    gpu.place_weights(entries, [&](uint64_t d, uint64_t t) { done = d, total = t; }, nullptr);
    EXPECT_GT(total, 0u);
    EXPECT_EQ(done, total);
    EXPECT_THROW(gpu.place_weights(entries, {}, nullptr), Error);
    gpu.begin_step(false);

    // Every placed matrix a linear takes, on 3 tokens.
    const int64_t T = 3;
    for (const StoreEntry& e : entries) {
      if (e.layout != DeviceLayout::mma) continue;
      const WeightView& v = e.views.at(0);
      std::vector<float> xs(size_t(T * v.cols));
      random_normal(xs.data(), int64_t(xs.size()), 7, 1.0f);
      Tensor x = gpu.alloc(T, v.cols), y = gpu.alloc(T, v.rows);
      gpu.upload(xs.data(), x);
      gpu.linear(BoundLinear{v, nullptr}, x, y);
      std::vector<float> got(size_t(T * v.rows)), row(size_t(v.cols));
      gpu.download(y, got.data());
      for (int64_t r = 0; r < v.rows; ++r) {
        dequantize_row(v, r, row.data());
        for (int64_t t = 0; t < T; ++t) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < v.cols; ++k) {
            want += double(row[size_t(k)]) * xs[size_t(t * v.cols + k)];
            mag += std::fabs(double(row[size_t(k)]) * xs[size_t(t * v.cols + k)]);
          }
          ASSERT_LE(std::fabs(got[size_t(t * v.rows + r)] - want), 0x1p-8 * mag + 1e-30)
              << e.name << " row " << r << " token " << t;
        }
      }
      gpu.begin_step(false);
    }

    // The grouped output projection and the MoE of every block (their
    // arithmetic is checked in cuda_backend_gpu_test.cpp; here: found placed).
    std::vector<const BlockWeights*> blocks;
    for (const BlockWeights& b : w.layers) blocks.push_back(&b);
    for (const MtpWeights& m : w.mtp) blocks.push_back(&m.block);
    const std::vector<int32_t> ids = {1, 2, 3};
    for (const BlockWeights* b : blocks) {
      std::vector<float> os(size_t(T * s.heads * s.head_dim)), xs(size_t(T * c.hidden));
      random_normal(os.data(), int64_t(os.size()), 8, 1.0f);
      random_normal(xs.data(), int64_t(xs.size()), 9, 1.0f);
      Tensor o = gpu.alloc(T, s.heads * s.head_dim), y = gpu.alloc(T, s.o_groups * s.o_lora);
      Tensor x = gpu.alloc(T, c.hidden), z = gpu.alloc(T, c.hidden);
      gpu.upload(os.data(), o);
      gpu.upload(xs.data(), x);
      gpu.grouped_wo_a(b->attn.wo_a, s, o, y);
      gpu.moe(*b, x, ids, z);
      std::vector<float> out(size_t(T * c.hidden));
      gpu.download(z, out.data());
      for (float f : out) ASSERT_TRUE(std::isfinite(f));
      gpu.begin_step(false);
    }
    EXPECT_EQ(gpu.first_use_repacks(), 0);
  }
}

}  // namespace
}  // namespace nibble
