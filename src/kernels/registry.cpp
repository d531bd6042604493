// The one flat list of kernels (like ggml's backend list). A kernel is listed
// only once it exists and is tested against the scalar reference.
//
// Efficiencies: the fraction of the device's read bandwidth (and peak
// arithmetic) the kernel reaches, from `nibble bench` on a 2-core AVX-512
// machine (see bench/RESULTS.md once kernels land). The scalar reference
// dequantizes every element and accumulates in f64; it streams at a few
// percent of bandwidth.
#include "kernels/registry.h"

namespace nibble {

namespace {

const std::vector<Format> kAllWeightFormats = {Format::mxfp4, Format::nvfp4, Format::fp8_block128,
                                               Format::bf16, Format::f32};

std::string needs_cpu(const Device& d) {
  return d.kind == DeviceKind::cpu ? "" : "needs a CPU device; " + d.name + " is a CUDA device";
}

}  // namespace

const std::vector<KernelDesc>& kernel_registry() {
  static const std::vector<KernelDesc> registry = {
      {"cpu_ref", Op::linear, kAllWeightFormats, needs_cpu, 0, 0.03, 0.01, "scalar, f64 accumulate",
       linear_ref, nullptr},
      {"cpu_ref", Op::moe, kAllWeightFormats, needs_cpu, 0, 0.03, 0.01, "scalar, f64 accumulate",
       nullptr, moe_ref},
  };
  return registry;
}

}  // namespace nibble
