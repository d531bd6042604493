// `nibble bench linear|moe --device cuda` through the real binary: without a
// GPU it says it skipped and why (exit 0, so a script can tell "nothing to
// time here" from an error); with one every row is a JSON object with the
// ratio to the read bandwidth measured in the same run, between 0 and the
// physical limit 1 (plus noise). Bad flags are usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "device/cuda_device.h"
#include "support/run_nibble.h"

namespace nibble {
namespace {

using test::run_nibble;
using test::RunResult;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CudaBenchCli, RunsOrSaysWhyNot) {
  for (const char* what : {"linear", "moe"}) {
    RunResult r = run_nibble({"bench", what, "--device", "cuda", "--batch", "1,8", "--iters", "3", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (cuda_probe().devices.empty()) {
      // The probe's reason: no device, or (a build without nvcc) no CUDA at all.
      EXPECT_TRUE(contains(r.out, "skipped: " + cuda_probe().error)) << r.out;
      continue;
    }
    std::istringstream lines(r.out);
    std::string line;
    int rows = 0;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] != '{') continue;
      const auto j = nlohmann::json::parse(line);
      EXPECT_GT(j["gbps"].get<double>(), 0) << line;
      EXPECT_GT(j["ratio"].get<double>(), 0) << line;
      EXPECT_LT(j["ratio"].get<double>(), 1.15) << line;  // above the measured read bandwidth is not physical
      ++rows;
    }
    // moe: w1, gate_up, w2 and the whole layer per token count.
    EXPECT_EQ(rows, std::string(what) == "moe" ? 8 : 2) << r.out;
  }
}

TEST(CudaBenchCli, BadFlagsAreUsageErrors) {
  RunResult dev = run_nibble({"bench", "linear", "--device", "cuda:7"});
  EXPECT_EQ(dev.exit_code, 2) << dev.err;
  EXPECT_TRUE(contains(dev.err, "--device")) << dev.err;
  RunResult what = run_nibble({"bench", "bandwidth", "--device", "cuda"});
  EXPECT_EQ(what.exit_code, 2) << what.err;
  EXPECT_TRUE(contains(what.err, "linear, moe")) << what.err;
  RunResult fmt = run_nibble({"bench", "linear", "--device", "cuda", "--format", "fp5"});
  EXPECT_EQ(fmt.exit_code, 2) << fmt.err;
}

}  // namespace
}  // namespace nibble
