// The backend a model's forward runs on, chosen by the device the model was
// planned for (LoadOptions::device, `--device`): this machine's CPU runs on
// CpuBackend over the model's thread pool, `cuda` / `cuda:N` on CudaBackend
// on that GPU. The named planning devices (sm_90, cpu-avx2, ...) describe
// hardware that is not here, so nothing runs on them.
#pragma once

#include <memory>

#include "device/device.h"
#include "model/backend.h"
#include "util/thread_pool.h"

namespace nibble {

class ForwardProfile;

// Throws nibble::Error naming the device when it is a planning device, or
// CUDA's reason when the GPU cannot be used.
std::unique_ptr<Backend> make_backend(const Device& device, ThreadPool* pool, ForwardProfile* profile);

// For the models whose ops exist only on the CPU backend (gpt-oss,
// DeepSeek-V3): throws naming `model` unless `device` is this machine's CPU.
void require_host_device(const Device& device, const char* model);

}  // namespace nibble
