// `nibble bench linear|moe --device cuda`: the tensor-core kernels timed
// with CUDA events on random weights that stream from HBM (linear: copies
// cycled past the L2; moe: 8 routings in turn, so a call's experts were not
// just read), reported against this GPU's read bandwidth measured in the
// same run and its nominal BF16 tensor-core peak (performance.md: ratios to
// the limit, never bare times).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/format.h"

namespace nibble {

struct CudaBenchRow {
  std::string op;       // "linear", "moe w1", "moe gate_up" (w1 + w3 fused with the SwiGLU), "moe w2", "moe layer"
  std::string format;
  int64_t tokens = 0;
  int64_t experts = 0;  // moe: distinct experts the tokens route to
  int k_splits = 1;     // the launcher's heuristic, what the engine runs
  double us = 0;        // per call at k_splits, mean of the timed calls
  int best_split = 1;   // the fastest of 1, 2, 4, 8, 16 and the heuristic (tuning data)
  double best_us = 0;
  double bytes = 0;     // weights (repacked) + activations read per call
  double gbps = 0;
  double read_ratio = 0;    // gbps / measured read bandwidth
  double tc_ratio = 0;      // useful flops / nominal BF16 tensor peak
};

struct CudaBenchReport {
  std::string device;       // "NVIDIA H200 (sm_90, 132 SMs)"
  double read_gbps = 0;     // measured in this run
  double tc_peak_gflops = 0;
  std::vector<CudaBenchRow> rows;
};

// Throws nibble::Error "no CUDA device: ..." without one. iters: timed
// calls per row (after one warm-up).
CudaBenchReport cuda_bench_linear(Format format, int64_t rows, int64_t cols, const std::vector<int64_t>& tokens,
                                  int iters);
// DeepSeek-V4-Flash's MoE layer shape: 256 experts, top-6, w1 / w3 [2048,
// 4096] and w2 [4096, 2048] in `format` (mxfp4 / nvfp4), uniform random
// routing: w1 alone, w1 + w3 fused with the SwiGLU, and w2.
CudaBenchReport cuda_bench_moe(Format format, const std::vector<int64_t>& tokens, int iters);
// The whole MoE layer at that shape, as the CUDA backend will launch it, with
// no host sync: activations to BF16, router logits (BF16 [256, 4096]
// linear), routing with bias, grouping, fused gate/up + SwiGLU, down, the
// FP8 shared expert (two linears, SwiGLU, one linear) and the combine. One
// row per token count, op "moe layer"; bytes are the weights the step reads
// (the experts actually routed to, counted after the run) plus x.
CudaBenchReport cuda_bench_moe_layer(Format format, const std::vector<int64_t>& tokens, int iters);

}  // namespace nibble
