// make_backend: the backend follows the planned device; the planning-only
// devices (sm_*, cpu-avx2, ...) run nothing and say how to use them.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "device/cuda_device.h"
#include "model/device_backend.h"
#include "util/error.h"

namespace nibble {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceBackend, HostRunsOnTheCpuBackend) {
  ThreadPool pool(1);
  auto be = make_backend(named_device("host", 1, 1.0), &pool, nullptr, CpuIsa::ref, true);
  EXPECT_STREQ(be->name(), "cpu");
  require_host_device(named_device("host", 1, 1.0), "gpt-oss");  // no throw
}

TEST(DeviceBackend, PlanningDevicesRunNothing) {
  ThreadPool pool(1);
  for (const char* name : {"sm_90", "sm_120", "cpu-avx2", "cpu-avx512"}) {
    const Device d = named_device(name, 1, 1.0);
    const std::string want = std::string("device ") + name + " is a device to plan for (`nibble explain --device " +
                             name + "`), not one of this machine's: run on host or cuda";
    EXPECT_EQ(error_of([&] { make_backend(d, &pool, nullptr, CpuIsa::ref, true); }), want);
    EXPECT_EQ(error_of([&] { require_host_device(d, "gpt-oss"); }), want);
  }
}

TEST(DeviceBackend, CudaWithoutADeviceSaysWhy) {
  if (!cuda_probe().devices.empty()) GTEST_SKIP() << "this machine has a GPU (tests/cuda covers it)";
  // named_device("cuda") itself refuses: the load never reaches the backend.
  const std::string e = error_of([] { named_device("cuda", 1, 1.0); });
  EXPECT_NE(e.find(cuda_probe().error), std::string::npos) << e;
  EXPECT_EQ(e.rfind("no CUDA device", 0), 0u) << e;
}

}  // namespace
}  // namespace nibble
