// The launch choices of the tensor-core linear kernels that depend only on
// shapes: host code, built with or without CUDA, tested on the CPU.
#include <algorithm>

#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/mma_layout.h"

namespace nibble {

MmaWeightsDevice mma_device_shape(const MmaMatrix& m) {
  MmaWeightsDevice d;
  d.format = m.format;
  d.rows = m.rows;
  d.cols = m.cols;
  d.rows_padded = m.rows_padded;
  d.cols_padded = m.cols_padded;
  d.col_blocks = m.col_blocks;
  return d;
}

int linear_mma_k_splits(int64_t rows_padded, int64_t chunks, int sms) {
  // As the MoE kernel (moe_w4a16_plan.cpp): about 16 warps per SM keep
  // enough 16-byte loads in flight to cover HBM latency. A strip is one
  // warp, so a 4096-row matrix (256 strips) on 132 SMs wants ~8 splits;
  // each split keeps >= 8 chunks so the atomic adds stay a small share.
  const int64_t strips = rows_padded / mma::kTileRows;
  if (strips <= 0 || chunks <= 0 || sms <= 0) return 1;
  const int64_t want = (int64_t(sms) * 16 + strips - 1) / strips;
  return int(std::clamp<int64_t>(std::min<int64_t>(want, chunks / 8), 1, 16));
}

}  // namespace nibble
