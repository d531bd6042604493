// The weight store on a CUDA device: one cudaMalloc holding every entry in
// its kernel's layout (weight_store.h), uploaded through two pinned staging
// buffers on a copy stream, and the kernels' device views of its entries.
// This is what the CUDA backend (issue 16) keeps for a loaded model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/weight_store.h"

namespace nibble {

class CudaWeightStore {
 public:
  // Uploads `entries` to cuda:`device`, refusing before any allocation or
  // copy when they and `reserve_bytes` do not fit in its free memory.
  // staging_bytes: each of the two pinned buffers. Throws nibble::Error.
  static std::unique_ptr<CudaWeightStore> load(const std::vector<StoreEntry>& entries, int device,
                                               uint64_t reserve_bytes, const StoreProgress& progress = {},
                                               uint64_t staging_bytes = uint64_t(64) << 20,
                                               ThreadPool* pool = nullptr);
  ~CudaWeightStore();
  CudaWeightStore(const CudaWeightStore&) = delete;
  CudaWeightStore& operator=(const CudaWeightStore&) = delete;

  uint64_t bytes() const { return upload_.plan.total_bytes; }
  const StoreUpload& upload() const { return upload_; }
  // The MoE kernel's view of w4a16 entry i (all its experts).
  W4A16ExpertsDevice experts(size_t i) const;
  // The linear kernel's view of mma entry i (one matrix: views.size() == 1).
  MmaWeightsDevice linear(size_t i) const;
  const uint8_t* stored(size_t i) const { return upload_.part(i, 0); }
  // The whole allocation copied back to the host (tests compare it with
  // what a host upload produces).
  std::vector<uint8_t> download() const;

 private:
  struct Shape {
    DeviceLayout layout;
    Format format;
    int64_t rows, cols, count;
  };
  CudaWeightStore() = default;
  int device_ = 0;
  StoreUpload upload_;
  std::vector<Shape> shapes_;
};

}  // namespace nibble
