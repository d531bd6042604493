// DeepSeek-V4's clamped SwiGLU as its own GPU step, for the experts whose
// gate / up run as two linears (the FP8 shared expert on linear_mma):
// h[t, i] = silu(min(g, limit)) * clamp(u, -limit, limit) (no clamp when
// limit <= 0), rounded to BF16 into a row of `ld` (columns inter..ld-1
// zero): the down projection's input. The routed experts have it fused into
// their gate/up GEMM (moe_w4a16_gate_up_launch).
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

// g, u: [n, inter] f32; h: [n, ld] BF16 bits, ld >= inter. On `stream`.
void swiglu_bf16_launch(const float* g, const float* u, int64_t n, int64_t inter, int64_t ld, float limit,
                        uint16_t* h, void* stream = nullptr);

// Host round trip for tests: h as f32 (the BF16 values decoded), [n, ld].
std::vector<float> swiglu_bf16_run_host(const std::vector<float>& g, const std::vector<float>& u, int64_t n,
                                        int64_t inter, int64_t ld, float limit);

}  // namespace nibble
