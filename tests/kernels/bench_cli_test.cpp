// `nibble bench` as a command: flags are checked, and --json prints one
// object per measurement with the fields the targets are stated in. (Speed
// itself is measured by running the benchmark, not asserted in tests.)
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace nibble {
namespace {

struct BenchRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

BenchRun run(const std::string& args) {
  BenchRun r;
  FILE* p = popen((std::string(NIBBLE_BINARY) + " bench " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(BenchCli, LinearJsonLines) {
  // --resident: one small copy of the weights, CPU-clock timing; --bandwidth
  // skips the (2 GB) bandwidth probe, so the ratio is against 10 GB/s.
  BenchRun r = run("linear --format nvfp4 --rows 48 --cols 64 --batch 1,3 --iters 3 --resident --bandwidth 10 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(lines, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& j = rows[i];
    EXPECT_EQ(j["op"], "linear");
    EXPECT_EQ(j["format"], "nvfp4");
    EXPECT_EQ(j["batch"], i == 0 ? 1 : 3);
    // 48 x 64 NVFP4: 1536 bytes of codes, 192 of block scales, 4 of s_g.
    EXPECT_EQ(j["bytes"].get<double>(), 48.0 * 64 / 2 + 48.0 * 64 / 16 + 4);
    EXPECT_EQ(j["bandwidth_gbps"].get<double>(), 10.0);
    const double med = j["time_ms_median"], lo = j["time_ms_min"], hi = j["time_ms_max"];
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
    EXPECT_NEAR(j["gbps"].get<double>(), j["bytes"].get<double>() / (med * 1e-3) / 1e9, 1e-9 * j["gbps"].get<double>());
    EXPECT_NEAR(j["ratio"].get<double>(), j["gbps"].get<double>() / 10.0, 1e-12);
    EXPECT_TRUE(j.contains("isa") && j.contains("threads") && j.contains("iters"));
  }
}

TEST(BenchCli, BadFlagsAreErrors) {
  for (const char* args : {"linear --format int", "linear --batch 0", "linear --batch 1,x", "moe --preset dsv4-pro",
                           "moe --routing magic", "linear --isa sse9", "linear --fp8-scale e5m2", "warp"}) {
    BenchRun r = run(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace nibble
