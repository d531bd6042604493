// The spelling of CUDA device names, shared by the CUDA and the CUDA-less build.
#include "device/cuda_device.h"

#include "util/error.h"

namespace nibble {

bool is_cuda_device_spec(const std::string& name) {
  if (name == "cuda") return true;
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 9) return false;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

int cuda_device_index(const std::string& spec) {
  if (!is_cuda_device_spec(spec)) fail("not a CUDA device name: '", spec, "' (expected cuda or cuda:N)");
  return spec == "cuda" ? 0 : std::stoi(spec.substr(5));
}

}  // namespace nibble
