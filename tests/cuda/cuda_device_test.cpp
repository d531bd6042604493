// CUDA discovery. Without a GPU (this project's CI, the development
// machines) the probe must report no device with the runtime's reason, and
// naming a CUDA device must fail with that reason; with one, the reported
// numbers are checked against what the runtime and a second measurement say.
#include <gtest/gtest.h>

#include "device/cuda_device.h"
#include "device/device.h"
#include "util/error.h"

namespace nibble {
namespace {

TEST(CudaDevice, SpellingOfDeviceNames) {
  EXPECT_TRUE(is_cuda_device_spec("cuda"));
  EXPECT_TRUE(is_cuda_device_spec("cuda:0"));
  EXPECT_TRUE(is_cuda_device_spec("cuda:12"));
  EXPECT_FALSE(is_cuda_device_spec("cuda:"));
  EXPECT_FALSE(is_cuda_device_spec("cuda:x"));
  EXPECT_FALSE(is_cuda_device_spec("cuda0"));
  EXPECT_FALSE(is_cuda_device_spec("sm_90"));
  EXPECT_FALSE(is_cuda_device_spec("cuda:-1"));
}

TEST(CudaDevice, NoDeviceIsReportedWithTheReason) {
  const CudaProbe& probe = cuda_probe();
  if (!probe.devices.empty()) GTEST_SKIP() << "this machine has a CUDA device (" << probe.devices[0].name << ")";
  ASSERT_FALSE(probe.error.empty());
#if NIBBLE_HAS_CUDA
  // The runtime's own words follow the prefix, e.g. "no CUDA-capable device
  // is detected" or "CUDA driver version is insufficient".
  EXPECT_EQ(probe.error.rfind("no CUDA device: ", 0), 0u) << probe.error;
  EXPECT_GT(probe.error.size(), std::string("no CUDA device: ").size()) << probe.error;
#else
  EXPECT_NE(probe.error.find("built without CUDA"), std::string::npos) << probe.error;
#endif
  for (const char* name : {"cuda", "cuda:0", "cuda:3"}) {
    try {
      named_device(name);
      FAIL() << name << ": expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("no CUDA device", 0), 0u) << e.what();
    }
  }
}

TEST(CudaDevice, UnknownNamesStillListTheCudaSpelling) {
  try {
    named_device("cuda:zero");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:N"), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, DiscoveredDeviceIsDescribed) {
  const CudaProbe& probe = cuda_probe();
  if (probe.devices.empty()) GTEST_SKIP() << "needs a CUDA device: " << probe.error;
  const CudaDeviceInfo& info = probe.devices[0];
  EXPECT_GE(info.sm, 50);
  EXPECT_GT(info.sms, 0);
  EXPECT_GT(info.memory_bytes, uint64_t(1) << 30);
  Device d = named_device("cuda");
  EXPECT_EQ(d.kind, DeviceKind::cuda);
  EXPECT_FALSE(d.hypothetical);
  EXPECT_EQ(d.name, "cuda:0");
  EXPECT_EQ(d.sm, info.sm);
  EXPECT_EQ(d.cores, info.sms);
  EXPECT_EQ(d.bandwidth_source, "measured");
  EXPECT_GT(d.peak_gflops, 0);
  // Two measurements of the same memory agree within 15% (the probe takes
  // the best of five passes; a shared GPU could still disturb one), and
  // HBM / GDDR of any sm_50+ part reads faster than 50 GB/s.
  const double again = cuda_read_bandwidth_gbps(0, uint64_t(1) << 30);
  EXPECT_GT(d.bandwidth_gbps, 50.0);
  EXPECT_NEAR(again / d.bandwidth_gbps, 1.0, 0.15) << d.bandwidth_gbps << " vs " << again << " GB/s";
  std::printf("[cuda] %s: %.0f GB/s read (4 GiB), %.0f GB/s (1 GiB)\n", d.description.c_str(), d.bandwidth_gbps,
              again);
}

}  // namespace
}  // namespace nibble
