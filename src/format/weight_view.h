// WeightView: a non-owning view of one weight matrix W[rows = out, cols = in]
// in its stored format, pointing into the checkpoint's memory map. Every
// linear kernel takes one; nothing is widened at load. It lives in format/
// (below checkpoint/ and kernels/, which both use it).
#pragma once

#include <cstdint>
#include <string>

#include "format/block.h"
#include "format/format.h"

namespace nibble {

struct WeightView {
  Format format = Format::f32;
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features (logical elements, not bytes)
  // mxfp4/nvfp4: [rows, cols/2] packed E2M1 (element 2j = low nibble of byte j)
  // int4: [rows, cols/2] codes q + 8 in the same nibble order (format/int4.h)
  // fp8_block128: [rows, cols] E4M3; bf16: [rows, cols] u16; f32: [rows, cols] f32
  const uint8_t* data = nullptr;
  // mxfp4: [rows, cols/32] UE8M0; nvfp4: [rows, cols/16] E4M3;
  // fp8_block128: [ceil(rows/128), ceil(cols/128)] UE8M0 or f32 (see fp8_scale)
  // int4: [rows, cols/group] BF16
  const uint8_t* scales = nullptr;
  Fp8ScaleType fp8_scale = Fp8ScaleType::ue8m0;
  float global_scale = 1.0f;  // nvfp4 weight_scale_2 (s_g); 1 otherwise
  int64_t group = 0;          // int4: elements per scale (a multiple of 8 dividing cols)
  std::string name;           // for messages: "layers.3.ffn.experts.7.w1"

  // Bytes a kernel must read to use the whole matrix (data + scales).
  uint64_t bytes() const;
};

// Dequantizes row r into out[cols] (exact: every stored value is an f32).
void dequantize_row(const WeightView& w, int64_t r, float* out);

}  // namespace nibble
