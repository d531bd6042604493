// Device detection, checked against what the kernel reports in /proc/cpuinfo
// (an independent reading of the same CPUID bits).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "device/device.h"
#include "util/error.h"

namespace nibble {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::set<std::string> flags;
      std::istringstream s(line.substr(line.find(':') + 1));
      std::string f;
      while (s >> f) flags.insert(f);
      return flags;
    }
  }
  return {};
}

TEST(CpuFeatures, MatchProcCpuinfo) {
  auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  const CpuFeatures& f = host_cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512vbmi, flags.count("avx512vbmi") == 1);
  EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
  EXPECT_EQ(f.avx512bf16, flags.count("avx512_bf16") == 1);
  EXPECT_EQ(f.amx_tile, flags.count("amx_tile") == 1);
  EXPECT_EQ(f.amx_int8, flags.count("amx_int8") == 1);
}

TEST(NamedDevices, AllNamesResolve) {
  for (const auto& name : named_device_list()) {
    if (name == "host") continue;  // measured: covered below with a flag
    Device d = named_device(name);
    EXPECT_EQ(d.name, name);
    EXPECT_TRUE(d.hypothetical);
    EXPECT_GT(d.bandwidth_gbps, 0);
    EXPECT_GT(d.peak_gflops, 0);
  }
  EXPECT_EQ(named_device("sm_120").kind, DeviceKind::cuda);
  EXPECT_EQ(named_device("sm_120").sm, 120);
  EXPECT_FALSE(named_device("cpu-avx2").cpu.avx512f);
  EXPECT_TRUE(named_device("cpu-avx512").cpu.avx512vnni);
}

TEST(NamedDevices, UnknownNameListsTheKnownOnes) {
  try {
    named_device("sm_75");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("sm_75"), std::string::npos);
    EXPECT_NE(msg.find("cpu-avx2"), std::string::npos);
  }
}

TEST(HostDevice, BandwidthFlagOverridesMeasurement) {
  Device d = named_device("host", 1, 42.5);
  EXPECT_EQ(d.bandwidth_gbps, 42.5);
  EXPECT_EQ(d.bandwidth_source, "--bandwidth flag");
  EXPECT_EQ(d.cores, 1);
  EXPECT_FALSE(d.hypothetical);
}

TEST(Bandwidth, MeasuresSomethingPlausible) {
  // A small buffer (cache-resident; real measurements use >= 512 MiB), best
  // of 20 passes on the calling thread (a second pool thread would add its
  // wake-up latency, milliseconds on a loaded machine). Upper bound: a core
  // loads at most 3 x 32 bytes per cycle (3 load ports on the widest current
  // x86 cores; the probe's loads are 16 bytes or less) at <= 6 GHz, 576 GB/s
  // per thread. Lower bound: the probe reads >= 8 bytes per instruction, >= 8
  // GB/s per thread at 1 GHz and one instruction per cycle; 1 GB/s leaves a
  // factor 8 for a machine shared with other builds. A probe that times the
  // wrong thing (an empty loop, a unit slip of 1e3) falls outside.
  const int threads = 1;
  double gbps = measure_read_bandwidth_gbps(threads, size_t(8) << 20, 20);
  std::printf("8 MiB read with %d threads: %.1f GB/s\n", threads, gbps);
  EXPECT_GT(gbps, 1.0);
  EXPECT_LT(gbps, threads * 3 * 32 * 6.0);
}

// read_lines reads every byte once: its XOR over random buffers of awkward
// sizes (no line, part of a line, fewer lines than streams, streams plus a
// remainder of lines and bytes) equals the 8-byte-word XOR computed here
// (whole lines as words, the bytes past the last line one by one). A line
// skipped or read twice changes it.
TEST(Bandwidth, ReadLinesReadsEveryByteOnce) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(64 * 1000 + 64);
  for (uint8_t& b : buf) b = uint8_t(rng());
  const uint8_t* p = buf.data();
  for (size_t bytes : {size_t(0), size_t(37), size_t(64), size_t(64 * 7 + 5), size_t(64 * 8), size_t(64 * 999 + 63)}) {
    uint64_t expect = 0;
    const size_t whole = bytes / 64 * 64;
    for (size_t i = 0; i < whole; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      expect ^= w;
    }
    for (size_t i = whole; i < bytes; ++i) expect ^= p[i];
    EXPECT_EQ(read_lines(p, bytes), expect) << bytes << " bytes";
  }
}

}  // namespace
}  // namespace nibble
