#include "model/device_backend.h"

#include "device/cuda_device.h"
#include "model/cpu_backend.h"
#include "model/cuda_backend.h"
#include "util/error.h"

namespace nibble {

namespace {

[[noreturn]] void planning_only(const Device& device) {
  fail("device ", device.name, " is a device to plan for (`nibble explain --device ", device.name,
       "`), not one of this machine's: run on host or cuda");
}

}  // namespace

std::unique_ptr<Backend> make_backend(const Device& device, ThreadPool* pool, ForwardProfile* profile) {
  if (device.hypothetical) planning_only(device);
  if (device.kind == DeviceKind::cpu) return std::make_unique<CpuBackend>(pool, profile);
  return std::make_unique<CudaBackend>(profile, cuda_device_index(device.name));
}

void require_host_device(const Device& device, const char* model) {
  if (device.hypothetical) planning_only(device);
  if (device.kind != DeviceKind::cpu)
    fail("device ", device.name, ": nibble runs ", model,
         " on this machine's CPU only (--device host); on a GPU it runs DeepSeek-V4 models");
}

}  // namespace nibble
