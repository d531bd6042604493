// CUDA discovery in a build without CUDA (NIBBLE_CUDA=OFF or no nvcc at
// configure time): there is no device to find, and every entry point says
// why. Compiled only when cuda_device.cu is not (cmake/cuda.cmake).
#include "device/cuda_device.h"
#include "util/error.h"

namespace nibble {

namespace {
constexpr const char* kNoCuda =
    "nibble was built without CUDA (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)";
}

const CudaProbe& cuda_probe() {
  static const CudaProbe probe{{}, kNoCuda};
  return probe;
}

double cuda_read_bandwidth_gbps(int index, uint64_t, int) { fail("cuda:", index, ": ", kNoCuda); }

Device cuda_device(const std::string& spec, double) {
  if (!is_cuda_device_spec(spec)) fail("not a CUDA device name: '", spec, "' (expected cuda or cuda:N)");
  fail("no CUDA device: ", kNoCuda);
}

}  // namespace nibble
