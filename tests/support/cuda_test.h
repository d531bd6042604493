// What the CUDA tests share: skipping without a device (saying why), so a
// machine without a GPU runs them as skips and scripts/gpu-check.sh can
// count a skip with a GPU present as a failure.
#pragma once

#include <gtest/gtest.h>

#include "device/cuda_device.h"

#define REQUIRE_CUDA_DEVICE()                                                                        \
  do {                                                                                               \
    if (::nibble::cuda_probe().devices.empty())                                                      \
      GTEST_SKIP() << "needs a CUDA device: " << ::nibble::cuda_probe().error;                       \
  } while (0)
