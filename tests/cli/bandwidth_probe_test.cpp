// The memory-bandwidth probe runs only where its number is shown (explain's
// tokens/s bound, bench) and says so; run/chat/logits/kld/tokenize skip it.
// That is safe because the planner's choice among the CPU kernels does not
// depend on the bandwidth: checked here by planning the same model at 1 and
// at 10,000 GB/s on every CPU device.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace nibble::testing {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<std::string> kernels(const std::string& dir, const std::string& device, const std::string& gbps) {
  RunResult r = run_nibble({"explain", dir, "--json", "--device", device, "--bandwidth", gbps});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out;
  const nlohmann::json plan = nlohmann::json::parse(r.out);  // kept alive: the loop walks into it
  for (const auto& g : plan["groups"])
    out.push_back(g["group"].get<std::string>() + "=" + (g["kernel"].is_null() ? "-" : g["kernel"].get<std::string>()));
  return out;
}

TEST(BandwidthProbe, CpuPlanDoesNotDependOnBandwidth) {
  for (const char* model : {"models/dsv4-tiny", "tests/fixtures/checkpoints/dsv4_stock",
                            "tests/fixtures/checkpoints/dsv4_nvfp4_current", "tests/fixtures/checkpoints/dsv4_bf16"})
    for (const char* device : {"host", "cpu-avx2", "cpu-avx512"})
      EXPECT_EQ(kernels(source_path(model), device, "1"), kernels(source_path(model), device, "10000"))
          << model << " on " << device;
}

TEST(BandwidthProbe, OnlyExplainMeasuresAndSaysSo) {
  const std::string model = source_path("models/dsv4-tiny");
  RunResult run = run_nibble({"run", "-p", "ROMEO.", "-n", "2", "-t", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(contains(run.err, "bandwidth")) << run.err;
  RunResult tok = run_nibble({"logits", model, "--tokens", "0", "--out", "-", "-t", "2"});
  EXPECT_FALSE(contains(tok.err, "bandwidth")) << tok.err;
  RunResult explain = run_nibble({"explain", model, "-t", "2"});
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_TRUE(contains(explain.err, "measuring memory bandwidth")) << explain.err;
  EXPECT_TRUE(contains(explain.out, "(measured)")) << explain.out;
  RunResult given = run_nibble({"explain", model, "--bandwidth", "12"});
  EXPECT_FALSE(contains(given.err, "measuring")) << given.err;
}

}  // namespace
}  // namespace nibble::testing
