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

std::unique_ptr<Backend> make_backend(const Device& device, ThreadPool* pool, ForwardProfile* profile,
                                      CpuIsa attention_isa, bool cuda_graphs) {
  if (device.hypothetical) planning_only(device);
  if (device.kind == DeviceKind::cpu) return std::make_unique<CpuBackend>(pool, profile, attention_isa);
  return std::make_unique<CudaBackend>(profile, cuda_device_index(device.name), cuda_graphs);
}

CpuIsa attention_isa_for(const std::string& b, const Device& device) {
  if (b == "cpu_ref") return CpuIsa::ref;
  if (b.rfind("cpu_avx512", 0) == 0) return CpuIsa::avx512;
  if (b.rfind("cpu_avx2", 0) == 0) return CpuIsa::avx2;
  return best_cpu_isa(device.cpu);
}

void require_host_device(const Device& device, const char* model) {
  if (device.hypothetical) planning_only(device);
  if (device.kind != DeviceKind::cpu)
    fail("device ", device.name, ": nibble runs ", model,
         " on this machine's CPU only (--device host); on a GPU it runs DeepSeek-V4 models");
}

}  // namespace nibble
