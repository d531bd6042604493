// The launch choices of the W4A16 grouped GEMM that depend only on shapes:
// host code, built with or without CUDA, tested on the CPU.
#include <algorithm>

#include "kernels/cuda/moe_w4a16.h"

namespace nibble {

int moe_w4a16_tokens_per_pass(int64_t max_per_expert) { return max_per_expert <= 8 ? 8 : 32; }

int moe_w4a16_k_splits(int64_t busy_strips, int64_t cols_padded, int sms) {
  // A weight-streaming kernel needs many loads in flight: about 16 warps per
  // SM, each with a 16-byte load per lane outstanding (gpu.md §7.1: ~20 KB
  // per SM at H200 latency x bandwidth). Fewer busy strips than that get K
  // split, each split keeping at least 4 chunks (256 columns) so the atomic
  // adds stay a small share of the work; at most 8 splits.
  const int64_t chunks = cols_padded / 64;
  if (busy_strips <= 0 || chunks <= 0 || sms <= 0) return 1;
  const int64_t want = (int64_t(sms) * 16 + busy_strips - 1) / busy_strips;
  return int(std::clamp<int64_t>(std::min<int64_t>(want, chunks / 4), 1, 8));
}

}  // namespace nibble
