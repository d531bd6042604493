// The full-size gpt-oss-20b and -120b skeletons (published names, shapes,
// dtypes and config.json; sparse shards): detection reads every expert
// tensor as MXFP4, and the plan's parameters and bytes per decoded token
// equal what the published shapes give when counted by hand below (and the
// published "21B / 117B parameters").
#include <gtest/gtest.h>

#include "checkpoint/skeleton.h"
#include "device/device.h"
#include "model/registry.h"
#include "support/temp_dir.h"

namespace nibble {
namespace {

struct Dims {
  int64_t layers, experts;
};

// Parameters and decode bytes from the published dimensions: V 201088, D 2880,
// 64 query heads and 8 KV heads of 64, experts of I = 2880, top-4, BF16
// everywhere but the MXFP4 experts (16 bytes + 1 scale byte per 32 weights).
struct Expected {
  uint64_t params = 0, bytes_per_token = 0;
};

Expected count(Dims d) {
  const uint64_t V = 201088, D = 2880, Q = 64 * 64, KV = 8 * 64, I = 2880, E = uint64_t(d.experts), K = 4;
  const uint64_t dense = 2 * D + (Q * D + Q) + 2 * (KV * D + KV) + (D * Q + D) + 64 + (E * D + E);  // BF16
  const uint64_t expert_w = 2 * I * D + D * I;                    // one expert's FP4 weights
  const uint64_t expert_bias = 2 * I + D;                         // BF16
  const uint64_t expert_bytes = expert_w / 2 + expert_w / 32 + 2 * expert_bias;
  Expected e;
  e.params = 2 * V * D + D + uint64_t(d.layers) * (dense + E * (expert_w + expert_bias));
  // A token reads one embedding row, every dense weight, top-k experts per layer, the head.
  e.bytes_per_token = 2 * D + 2 * D + V * D * 2 + uint64_t(d.layers) * (2 * dense + K * expert_bytes);
  return e;
}

void check(const std::string& size, Dims dims, double published_params_b) {
  test::TempDir dir;
  write_gpt_oss_skeleton(dir.str(), size);
  auto ck = Checkpoint::open(dir.str());
  Detection det = detect_formats(*ck);
  EXPECT_TRUE(det.unsupported.empty());
  int mxfp4 = 0;
  for (const auto& t : det.tensors) mxfp4 += t.format == Format::mxfp4;
  EXPECT_EQ(mxfp4, 2 * dims.layers);
  const Plan plan = plan_model(*ck, det, host_cpu_device(2, 100.0), PlanOptions{});
  const Expected e = count(dims);
  EXPECT_EQ(plan.architecture, "GptOssForCausalLM");
  EXPECT_EQ(plan.params, e.params);
  EXPECT_NEAR(double(plan.params) / 1e9, published_params_b, 0.05);
  EXPECT_EQ(plan.bytes_per_token, e.bytes_per_token);
  EXPECT_DOUBLE_EQ(plan.bound_tokens_per_s, 100e9 / double(e.bytes_per_token));
  std::printf("gpt-oss-%s: %.3fB parameters, %.3f GB per token, bound %.1f tokens/s at 100 GB/s\n", size.c_str(),
              double(plan.params) / 1e9, double(plan.bytes_per_token) / 1e9, plan.bound_tokens_per_s);
}

TEST(GptOssSkeleton, Published20bPlansItsParametersAndBytes) { check("20b", {24, 32}, 20.91); }
TEST(GptOssSkeleton, Published120bPlansItsParametersAndBytes) { check("120b", {36, 128}, 116.83); }

}  // namespace
}  // namespace nibble
