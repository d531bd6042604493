// `--device` on the commands that load a model (run, logits, bench decode):
// the planning-only names and unknown names are usage errors (exit 2);
// `cuda` without a GPU is a clear error (exit 1) and with one runs the
// shipped model. Runs everywhere: a machine without a GPU checks the
// errors, scripts/gpu-check.sh's machine the runs.
#include <gtest/gtest.h>

#include <string>

#include "support/cuda_test.h"
#include "support/run_nibble.h"
#include "support/source_dir.h"

namespace nibble {
namespace {

using test::RunResult;
using test::run_nibble;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string shipped() { return test::source_dir() + "/models/dsv4-tiny"; }

TEST(DeviceFlag, PlanningDevicesAndUnknownNamesAreUsageErrors) {
  for (const char* planned : {"sm_90", "cpu-avx2"}) {
    const RunResult r = run_nibble({"run", shipped(), "--device", planned, "-n", "2", "-p", "ROMEO:"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, std::string(planned) + " is a device to plan for")) << r.err;
    EXPECT_TRUE(contains(r.err, "nibble explain --device")) << r.err;
  }
  const RunResult r = run_nibble({"logits", shipped(), "--device", "gpu0", "--tokens", "1,2", "--out", "/dev/null"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "unknown device 'gpu0' (host, cuda, cuda:N)")) << r.err;
  // serve reads the same flags (it once built its options apart and
  // ignored --device): refused before it opens a socket.
  const RunResult s = run_nibble({"serve", shipped(), "--device", "sm_120", "--port", "0"});
  EXPECT_EQ(s.exit_code, 2) << s.err;
  EXPECT_TRUE(contains(s.err, "sm_120 is a device to plan for")) << s.err;
  EXPECT_FALSE(contains(s.err, "listening")) << s.err;
}

// A GPU serve cannot start: without a GPU, say why; with one, ask for an
// ordinal it does not have (a serve that started would never return).
TEST(DeviceFlag, ServeOnAMissingGpuSaysWhy) {
  const bool gpu = !cuda_probe().devices.empty();
  const RunResult s = run_nibble({"serve", shipped(), "--device", gpu ? "cuda:99" : "cuda", "--port", "0"});
  EXPECT_EQ(s.exit_code, 1) << s.err;
  EXPECT_TRUE(contains(s.err, gpu ? "no CUDA device cuda:99: this machine has" : cuda_probe().error)) << s.err;
}

TEST(DeviceFlag, CudaRunsTheShippedModelOrSaysWhyNot) {
  const RunResult run = run_nibble({"run", shipped(), "--device", "cuda", "-n", "8", "--temp", "0", "-p", "ROMEO:"});
  const RunResult bench = run_nibble({"bench", "decode", shipped(), "--device", "cuda", "--sequences", "1,4", "-n",
                                      "4", "--prompt-tokens", "16", "--json"});
  if (cuda_probe().devices.empty()) {
    // No GPU: the reason the CUDA runtime (or the build) gives, nothing else.
    for (const RunResult* r : {&run, &bench}) {
      EXPECT_EQ(r->exit_code, 1) << r->err;
      EXPECT_TRUE(contains(r->err, cuda_probe().error)) << r->err;
    }
    GTEST_SKIP() << "needs a CUDA device for the runs themselves: " << cuda_probe().error;
  }
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_TRUE(contains(bench.out, "\"sequences\": 4")) << bench.out;
  std::printf("%s", bench.out.c_str());
}

// --no-cuda-graphs is a load flag of every model command: without a GPU
// the error is still the CUDA one (the flag parsed, not a usage error);
// with one, bench decode says after each row how its decode steps ran: as
// CUDA graphs (launches, updates, host time per launch) or not.
TEST(DeviceFlag, CudaGraphsCanBeTurnedOff) {
  const RunResult on = run_nibble({"bench", "decode", shipped(), "--device", "cuda", "--sequences", "2", "-n", "6",
                                   "--prompt-tokens", "8", "--json"});
  const RunResult off = run_nibble({"bench", "decode", shipped(), "--device", "cuda", "--sequences", "2", "-n", "6",
                                    "--prompt-tokens", "8", "--json", "--no-cuda-graphs"});
  if (cuda_probe().devices.empty()) {
    EXPECT_EQ(off.exit_code, 1) << off.err;
    EXPECT_TRUE(contains(off.err, cuda_probe().error)) << off.err;
    GTEST_SKIP() << "needs a CUDA device for the runs themselves: " << cuda_probe().error;
  }
  ASSERT_EQ(on.exit_code, 0) << on.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(contains(on.err, "graph launches")) << on.err;
  EXPECT_TRUE(contains(off.err, "CUDA graphs off (--no-cuda-graphs)")) << off.err;
  std::printf("graphs: %s\neager: %s\n", on.err.c_str(), off.err.c_str());
}

}  // namespace
}  // namespace nibble
