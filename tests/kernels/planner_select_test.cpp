// The planner's pure choice function on a synthetic registry: the cheapest
// runnable kernel wins (lossy kernels only when forced), every other
// candidate is listed with its reason, and a forced backend that cannot run
// is an error, never a silent fallback. Then the real registry's promise: the
// automatic choice never rounds activations.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

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

namespace nibble {
namespace {

// Opt-in (lossy) kernels: never the automatic choice, however cheap; the
// rejection names what they round and the flag that runs them; forcing one
// still works and says it is lossy.
const std::vector<KernelDesc>& lossy_registry() {
  static const std::vector<KernelDesc> registry = {
      {"exact", Op::moe, {Format::mxfp4, Format::bf16}, needs_cpu, 0, 0.5, 0.5, "simd"},
      {"fast_int8", Op::moe, {Format::mxfp4, Format::bf16}, needs_cpu, 0, 0.9, 0.9, "simd int8", nullptr, nullptr,
       "quantizes activations to int8", {Format::mxfp4}},
  };
  return registry;
}

TEST(Select, LossyKernelsAreOptIn) {
  Device dev = named_device("cpu-avx512");
  OpShape s = shape(Format::mxfp4);
  s.op = Op::moe;
  Selection a = select_kernel(lossy_registry(), s, dev, "auto", "--moe-backend");
  ASSERT_NE(a.chosen, nullptr);
  EXPECT_STREQ(a.chosen->name, "exact");
  ASSERT_NE(find(a, "fast_int8"), nullptr);
  EXPECT_EQ(find(a, "fast_int8")->reason,
            "quantizes activations to int8 (lossy); opt in with --moe-backend fast_int8");
  // For a format it does not round, it is still opt-in only, and says so.
  s.format = Format::bf16;
  Selection b = select_kernel(lossy_registry(), s, dev, "auto", "--moe-backend");
  EXPECT_STREQ(b.chosen->name, "exact");
  EXPECT_NE(find(b, "fast_int8")->reason.find("opt-in only"), std::string::npos) << find(b, "fast_int8")->reason;
  EXPECT_NE(find(b, "fast_int8")->reason.find("exact for bf16"), std::string::npos);
  // Forced: it runs, and the reason says what it rounds.
  s.format = Format::mxfp4;
  Selection f = select_kernel(lossy_registry(), s, dev, "fast_int8", "--moe-backend");
  EXPECT_STREQ(f.chosen->name, "fast_int8");
  EXPECT_NE(f.why.find("lossy: quantizes activations to int8"), std::string::npos) << f.why;
  EXPECT_TRUE(kernel_is_lossy(*f.chosen, Format::mxfp4));
  EXPECT_FALSE(kernel_is_lossy(*f.chosen, Format::bf16));
}

TEST(Registry, PlannerNeverPicksALossyKernel) {
  // Every op, format, batch and CPU device: the automatic choice is exact,
  // and on AVX-512 / AVX2 devices the int8 FP4 kernels are listed as opt-in.
  for (const char* dev_name : {"cpu-avx512", "cpu-avx2"}) {
    Device dev = named_device(dev_name);
    const std::string int8 = std::string(dev_name) == "cpu-avx512" ? "cpu_avx512_int8" : "cpu_avx2_int8";
    for (Op op : {Op::linear, Op::moe})
      for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16, Format::f32})
        for (int64_t batch : {1, 4, 64, 4096}) {
          OpShape s = shape(f, batch);
          s.op = op;
          const std::string flag = op == Op::moe ? "--moe-backend" : "--linear-backend";
          Selection sel = select_kernel(kernel_registry(), s, dev, "auto", flag);
          ASSERT_NE(sel.chosen, nullptr);
          EXPECT_EQ(sel.chosen->lossy, nullptr) << sel.chosen->name << " for " << format_name(f);
          // The widest ISA the device has, at every batch (also where the
          // estimate is compute-bound).
          EXPECT_EQ(std::string(sel.chosen->name), std::string(dev_name) == "cpu-avx512" ? "cpu_avx512" : "cpu_avx2")
              << format_name(f) << " batch " << batch;
          const Rejection* r = find(sel, int8);
          ASSERT_NE(r, nullptr) << int8;
          if (f == Format::mxfp4 || f == Format::nvfp4) {
            EXPECT_EQ(r->reason, "quantizes activations to int8 (lossy); opt in with " + flag + " " + int8);
          }
          // Forcing it works.
          Selection forced = select_kernel(kernel_registry(), s, dev, int8, flag);
          EXPECT_STREQ(forced.chosen->name, int8.c_str());
        }
  }
}

// `nibble explain` shows the same: the int8 kernels rejected with the opt-in
// hint, and a forced one chosen.
std::string run_explain(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(NIBBLE_BINARY) + " explain " + std::string(NIBBLE_SOURCE_DIR) +
                   "/tests/fixtures/dsv4/flash_tiny_stock --device cpu-avx512 --bandwidth 10 " + args + " 2>&1")
                      .c_str(),
                  "r");
  if (!p) return out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  pclose(p);
  return out;
}

TEST(Explain, ListsInt8KernelsAsOptIn) {
  const std::string out = run_explain("");
  EXPECT_NE(out.find("routed_experts             mxfp4"), std::string::npos) << out;
  EXPECT_NE(out.find("not cpu_avx512_int8: quantizes activations to int8 (lossy); opt in with --moe-backend "
                     "cpu_avx512_int8"),
            std::string::npos)
      << out;
  const std::string forced = run_explain("--moe-backend cpu_avx512_int8");
  EXPECT_NE(forced.find("cpu_avx512_int8 (moe)"), std::string::npos) << forced;
  EXPECT_NE(forced.find("lossy: quantizes activations to int8"), std::string::npos) << forced;
}

}  // namespace
}  // namespace nibble

namespace nibble {
namespace {

// The AMX kernel is exact but not batch invariant: never the automatic
// choice on a machine that has AMX (its rejection says why and how to opt
// in), refused by feature on one that does not, and when forced the choice
// says what it gives up.
TEST(Select, AmxKernelIsOptInAndSaysWhy) {
  const OpShape s = shape(Format::mxfp4, 64);
  Device amx = named_device("cpu-avx512");
  amx.cpu.amx_tile = amx.cpu.amx_bf16 = true;
  const Selection with = select_kernel(kernel_registry(), s, amx);
  ASSERT_NE(with.chosen, nullptr);
  EXPECT_STRNE(with.chosen->name, "cpu_avx512_amx");
  const Rejection* r = find(with, "cpu_avx512_amx");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->reason.find("opt-in only (not batch invariant"), std::string::npos) << r->reason;
  EXPECT_NE(r->reason.find("opt in with --linear-backend cpu_avx512_amx"), std::string::npos) << r->reason;

  const Selection without = select_kernel(kernel_registry(), s, named_device("cpu-avx512"));
  r = find(without, "cpu_avx512_amx");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->reason.find("needs AMX-TILE, AMX-BF16"), std::string::npos) << r->reason;

  const Selection forced = select_kernel(kernel_registry(), s, amx, "cpu_avx512_amx", "--linear-backend");
  ASSERT_NE(forced.chosen, nullptr);
  EXPECT_STREQ(forced.chosen->name, "cpu_avx512_amx");
  EXPECT_NE(forced.why.find("not batch invariant"), std::string::npos) << forced.why;
}

}  // namespace
}  // namespace nibble
