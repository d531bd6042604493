// CudaCheck: turns a failed CUDA runtime call into nibble's error, naming the
// module and the call ("linear_mma: kernel launch: invalid argument").
#pragma once

#include <cuda_runtime.h>

#include "util/error.h"

namespace nibble {

// One per .cu file, `constexpr CudaCheck check{"module"};`, so call sites
// read `check(cudaMalloc(...), "cudaMalloc")` and the message still says
// which module failed.
struct CudaCheck {
  const char* who;  // the module named first in the message
  void operator()(cudaError_t e, const char* what) const {
    if (e != cudaSuccess) fail(who, ": ", what, ": ", cudaGetErrorString(e));
  }
};

}  // namespace nibble
