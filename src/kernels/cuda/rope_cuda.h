// DeepSeek-V4's interleaved RoPE on the GPU (model/deepseek_v4_rope.h): the
// trailing rope_dim channels of each of a row's `heads` vectors rotate in
// pairs (2i, 2i+1) by pos * inv_freq[i], scaled by the attention factor;
// inverse = the conjugate rotation that takes RoPE back off the attention
// output. The frequency table (YaRN blend included) is RopeTable's, computed
// once on the host and uploaded, so host and device angles agree bit for bit
// before the cos / sin (kernels/ does not see model/: callers pass the
// table's numbers).
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

// x [n, heads * width] in place; positions [n] (device int64); inv_freq
// [rope_dim / 2] (device f32). One thread per pair.
void cuda_rope(const float* inv_freq, int64_t rope_dim, float attention_factor, float* x, int64_t n, int64_t heads,
               int64_t width, const int64_t* positions, bool inverse, void* stream = nullptr);

// Host round trip for tests: x after the rotation by the table inv_freq
// [rope_dim / 2] (RopeTable::inv_freq) with its attention factor.
std::vector<float> cuda_rope_host(const std::vector<float>& inv_freq, float attention_factor, std::vector<float> x,
                                  int64_t heads, int64_t width, const std::vector<int64_t>& positions, bool inverse);

}  // namespace nibble
