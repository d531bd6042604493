// Validation of weight bytes the SIMD kernels would misread (WeightView
// itself: format/weight_view.h).
#pragma once

#include "format/weight_view.h"

namespace nibble {

// Rejects NaN encodings the SIMD kernels would decode as finite numbers
// (they widen scale codes with bit moves, not table lookups): the UE8M0 code
// 0xFF (MXFP4 scales, FP8 block-128 UE8M0 scales), the E4M3 codes 0x7F /
// 0xFF (NVFP4 scales), and a non-finite or non-positive NVFP4 global scale
// or f32 FP8 tile scale. Throws nibble::Error naming w.name and the element.
// Reads only the scales (1/16 of an FP4 tensor's bytes, 1/16384 of an FP8
// one's): E2M1 has no NaN code, and the FP8 kernels' E4M3 weight codes
// would need a pass over every FP8 byte, so they are checked only with
// `fp8_codes` (the E4M3 NaN codes 0x7F / 0xFF become 480 in the kernels).
void check_weight_codes(const WeightView& w, bool fp8_codes = false);

}  // namespace nibble
