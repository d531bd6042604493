// The planner's pure choice function on a synthetic registry: the cheapest
// runnable kernel wins, every other candidate is listed with its reason, and a
// forced backend that cannot run is an error, never a silent fallback.
#include <gtest/gtest.h>

#include "kernels/registry.h"
#include "util/error.h"

namespace nibble {
namespace {

std::string needs_cpu(const Device& d) { return d.kind == DeviceKind::cpu ? "" : "needs a CPU"; }
std::string needs_avx512(const Device& d) {
  if (d.kind != DeviceKind::cpu) return "needs a CPU";
  return d.cpu.avx512f && d.cpu.avx512vnni ? "" : "needs AVX-512 VNNI";
}

// Static: a Selection points into the registry it was chosen from.
const std::vector<KernelDesc>& test_registry() {
  static const std::vector<KernelDesc> registry = {
      {"slow", Op::linear, {Format::mxfp4, Format::bf16}, needs_cpu, 0, 0.05, 0.05, "scalar"},
      {"fast", Op::linear, {Format::mxfp4}, needs_avx512, 16, 0.9, 0.5, "simd"},
      {"moe_slow", Op::moe, {Format::mxfp4}, needs_cpu, 0, 0.05, 0.05, "scalar"},
  };
  return registry;
}

OpShape shape(Format f, int64_t batch = 1) {
  OpShape s;
  s.op = Op::linear;
  s.format = f;
  s.rows = 4096;
  s.cols = 4096;
  s.batch = batch;
  s.bytes = 4096.0 * 4096 * 0.53;
  s.flops = 2.0 * 4096 * 4096 * batch;
  return s;
}

const Rejection* find(const Selection& s, const std::string& k) {
  for (const auto& r : s.rejected)
    if (r.kernel == k) return &r;
  return nullptr;
}

TEST(Select, CheapestRunnableWins) {
  Device dev = named_device("cpu-avx512");
  Selection s = select_kernel(test_registry(), shape(Format::mxfp4), dev);
  ASSERT_NE(s.chosen, nullptr);
  EXPECT_STREQ(s.chosen->name, "fast");
  ASSERT_EQ(s.rejected.size(), 1u);  // only linear kernels are candidates
  EXPECT_NE(find(s, "slow")->reason.find("slower"), std::string::npos);
  // The estimate is bytes / (bandwidth * efficiency), computed by hand.
  EXPECT_NEAR(s.cost_s, 4096.0 * 4096 * 0.53 / (186e9 * 0.9), 1e-12);
}

TEST(Select, MissingFeatureIsTheReason) {
  Device dev = named_device("cpu-avx2");
  Selection s = select_kernel(test_registry(), shape(Format::mxfp4), dev);
  ASSERT_NE(s.chosen, nullptr);
  EXPECT_STREQ(s.chosen->name, "slow");
  EXPECT_EQ(find(s, "fast")->reason, "needs AVX-512 VNNI");
}

TEST(Select, FormatAndBatchLimitsAreReasons) {
  Device dev = named_device("cpu-avx512");
  Selection s = select_kernel(test_registry(), shape(Format::bf16), dev);
  EXPECT_STREQ(s.chosen->name, "slow");
  EXPECT_EQ(find(s, "fast")->reason, "does not handle bf16");
  Selection b = select_kernel(test_registry(), shape(Format::mxfp4, 64), dev);
  EXPECT_STREQ(b.chosen->name, "slow");
  EXPECT_EQ(find(b, "fast")->reason, "batch 64 is above its limit of 16");
}

TEST(Select, NothingRunsOnAnotherDeviceKind) {
  Selection s = select_kernel(test_registry(), shape(Format::mxfp4), named_device("sm_120"));
  EXPECT_EQ(s.chosen, nullptr);
  EXPECT_EQ(s.rejected.size(), 2u);
}

TEST(Select, OverrideIsHonoured) {
  Device dev = named_device("cpu-avx512");
  Selection s = select_kernel(test_registry(), shape(Format::mxfp4), dev, "slow", "--linear-backend");
  EXPECT_STREQ(s.chosen->name, "slow");
  EXPECT_NE(find(s, "fast")->reason.find("--linear-backend slow"), std::string::npos);
  Selection a = select_kernel(test_registry(), shape(Format::mxfp4), dev, "auto");
  EXPECT_STREQ(a.chosen->name, "fast");
}

TEST(Select, ForcedBackendThatCannotRunIsAnError) {
  Device dev = named_device("cpu-avx2");
  try {
    select_kernel(test_registry(), shape(Format::mxfp4), dev, "fast", "--moe-backend");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("--moe-backend fast"), std::string::npos);
    EXPECT_NE(msg.find("needs AVX-512 VNNI"), std::string::npos);
  }
  EXPECT_THROW(select_kernel(test_registry(), shape(Format::mxfp4), dev, "nonexistent"), Error);
  // A kernel of another op is not a candidate for this one.
  EXPECT_THROW(select_kernel(test_registry(), shape(Format::mxfp4), dev, "moe_slow"), Error);
}

TEST(Registry, EveryFormatHasAReferenceKernel) {
  Device host = named_device("host", 1, 10.0);
  for (Op op : {Op::linear, Op::moe})
    for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16, Format::f32}) {
      OpShape s = shape(f);
      s.op = op;
      Selection sel = select_kernel(kernel_registry(), s, host, "cpu_ref");
      ASSERT_NE(sel.chosen, nullptr);
      EXPECT_TRUE(op == Op::linear ? sel.chosen->linear != nullptr : sel.chosen->moe != nullptr);
    }
}

}  // namespace
}  // namespace nibble
