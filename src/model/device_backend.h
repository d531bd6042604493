// The backend a model's forward runs on, chosen by the device the model was
// planned for (LoadOptions::device, `--device`): this machine's CPU runs on
// CpuBackend over the model's thread pool, `cuda` / `cuda:N` on CudaBackend
// on that GPU. The named planning devices (sm_90, cpu-avx2, ...) describe
// hardware that is not here, so nothing runs on them.
#pragma once

#include <memory>
#include <string>

#include "device/device.h"
#include "kernels/cpu/cpu_isa.h"
#include "model/backend.h"
#include "util/thread_pool.h"

namespace nibble {

class ForwardProfile;

// Throws nibble::Error naming the device when it is a planning device, or
// CUDA's reason when the GPU cannot be used. attention_isa: the path of the
// CPU backend's attention kernels. cuda_graphs: a GPU's decode steps as
// CUDA graphs (LoadOptions::cuda_graphs).
std::unique_ptr<Backend> make_backend(const Device& device, ThreadPool* pool, ForwardProfile* profile,
                                      CpuIsa attention_isa, bool cuda_graphs);

// The CPU attention kernels follow the linear kernels when those are forced
// to one ISA (--linear-backend cpu_ref, cpu_avx2*, cpu_avx512*: a reference
// run stays scalar throughout, an AVX2 run on an AVX-512 host runs AVX2
// attention too); otherwise the planned device's best.
CpuIsa attention_isa_for(const std::string& linear_backend, const Device& device);

// For the models whose ops exist only on the CPU backend (gpt-oss,
// DeepSeek-V3): throws naming `model` unless `device` is this machine's CPU.
void require_host_device(const Device& device, const char* model);

}  // namespace nibble
