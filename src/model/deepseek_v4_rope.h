// DeepSeek-V4 rotary embedding: interleaved pairs (channels 2i, 2i+1 rotate
// together) on the trailing `rope_dim` channels of a vector laid out
// [nope | rope]. Two flavours (dsv4.md §2.3): "main" (theta 10000, plain) for
// sliding layers and "compress" (theta 160000, YaRN frequency blend, no
// mscale) for CSA/HCA attention, their compressors and the indexer. The
// frequency table is computed the way transformers computes it in f32, so
// angles match HF to the last bit in most cases.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v4_config.h"

namespace nibble {

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeConfig& cfg, int64_t rope_dim);

  int64_t rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [rope_dim / 2]
  float attention_factor() const { return attention_factor_; }      // multiplies cos and sin

  // cos/sin of every pair at `pos`: [rope_dim / 2] each.
  void angles(int64_t pos, float* cos, float* sin) const;

  // Rotates the trailing rope_dim channels of each of `count` vectors of
  // `width` floats (stride `width`) by the angle of `pos`; inverse = the
  // conjugate rotation (used to take RoPE back off the attention output).
  void apply(float* x, int64_t count, int64_t width, int64_t pos, bool inverse) const;

 private:
  int64_t rope_dim_ = 0;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;
};

}  // namespace nibble
