// `nibble bench` as a command: flags are checked, and --json prints one
// object per measurement with the fields the targets are stated in. (Speed
// itself is measured by running the benchmark, not asserted in tests.)
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/registry.h"

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
    // Without --backend: what the planner picks for this op here.
    OpShape shape;
    shape.op = Op::linear;
    shape.format = Format::nvfp4;
    shape.rows = 48;
    shape.cols = 64;
    shape.batch = 3;
    shape.bytes = j["bytes"].get<double>();
    shape.flops = 2.0 * 48 * 64 * 3;
    const Selection sel = select_kernel(kernel_registry(), shape, named_device("host", 1, 10.0));
    ASSERT_NE(sel.chosen, nullptr);
    EXPECT_EQ(j["backend"], sel.chosen->name);
    EXPECT_EQ(sel.chosen->lossy, nullptr);
  }
}

TEST(BenchCli, BackendByName) {
  // The opt-in int8 and int16 kernels can be measured by name; --isa is a
  // shorthand for the default kernel of an ISA.
  if (!cpu_isa_unsupported(CpuIsa::avx2, host_cpu_features()).empty()) GTEST_SKIP() << "no AVX2";
  for (const auto& [args, backend, isa] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--backend cpu_avx2_int8", "cpu_avx2_int8", "avx2"},
           {"--backend cpu_avx2_int16", "cpu_avx2_int16", "avx2"},
           {"--isa avx2", "cpu_avx2", "avx2"},
           {"--backend cpu_ref", "cpu_ref", "ref"},
           // The read-only stand-in (the memory pattern's ceiling), on the
           // widest ISA here, reports the same bytes as the kernels.
           {"--backend read", "read", cpu_isa_name(best_cpu_isa(host_cpu_features()))}}) {
    BenchRun r = run("linear --format mxfp4 --rows 16 --cols 64 --iters 2 --resident --bandwidth 10 --json " + args);
    ASSERT_EQ(r.status, 0) << args << ": " << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["backend"], backend) << args;
    EXPECT_EQ(j["isa"], isa) << args;
    EXPECT_EQ(j["bytes"].get<double>(), 16.0 * 64 / 2 + 16.0 * 64 / 32) << args;
    EXPECT_TRUE(j["bytes"].is_number_integer()) << j["bytes"];
  }
}

TEST(BenchCli, BadFlagsAreErrors) {
  for (const char* args : {"linear --format int", "linear --batch 0", "linear --batch 1,x", "moe --preset dsv4-pro",
                           "moe --routing magic", "linear --isa sse9", "linear --fp8-scale e5m2", "warp",
                           "linear --backend warp_drive", "linear --isa ref --backend cpu_ref",
                           "moe --backend cpu_ref_int8", "moe --backend read --routing router",
                           "linear --backend read --isa avx2", "moe --probe-memory sometimes"}) {
    BenchRun r = run(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;  // bad usage
    EXPECT_NE(r.out.find("error"), std::string::npos) << args << ": " << r.out;
  }
  // A column count the format cannot store names the flag, not an internal function.
  BenchRun cols = run("linear --cols 100 --format mxfp4");
  EXPECT_EQ(cols.status, 2) << cols.out;
  EXPECT_NE(cols.out.find("--cols"), std::string::npos) << cols.out;
  EXPECT_EQ(cols.out.find("random_weights"), std::string::npos) << cols.out;
  // --routing shared is a mode (the error is about the batch, checked after it).
  BenchRun r = run("moe --routing shared --batch 0");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--batch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--routing"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nibble
