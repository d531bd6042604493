// What the SIMD kernels do to activations before a product, rewritten from
// the definitions (not from the kernels) so tests can build references that
// round the same way: int8 blocks of 32 before FP4 weights in the opt-in
// int8 kernels, int16 blocks of 32 in the int16 ones; nothing in the default
// (exact) ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/linear_cpu.h"

namespace nibble::test {

// v[rows, cols] rounded to the grid of integers up to qmax (127: int8,
// 32767: int16): per row and block of 32, step amax / qmax (f32),
// q = round-half-even(v * (qmax / amax)).
inline void round_int_blocks(std::vector<float>& v, int64_t cols, float qmax) {
  for (size_t r = 0; r < v.size() / size_t(cols); ++r)
    for (int64_t b = 0; b < cols; b += 32) {
      float* p = v.data() + r * size_t(cols) + size_t(b);
      const int64_t len = std::min<int64_t>(32, cols - b);
      float amax = 0.0f;
      for (int64_t j = 0; j < len; ++j) amax = std::max(amax, std::fabs(p[j]));
      const float d = amax / qmax, inv = amax > 0.0f ? qmax / amax : 0.0f;
      for (int64_t j = 0; j < len; ++j) p[j] = std::nearbyint(p[j] * inv) * d;
    }
}

// Rounds x [.., cols] the way `isa` in mode `acts` prepares activations for
// weights of `w`, when n tokens are prepared together.
inline void round_like_kernel(std::vector<float>& x, int64_t cols, CpuIsa isa, Fp4Acts acts,
                              const WeightView& w, int64_t n = 1) {
  const cpu::IsaKernels& k = cpu::isa_kernels(isa, acts);
  switch (k.acts_class(cpu::raw_weights(w).kind, n)) {
    case x86::ActsClass::int8_blocks:
    case x86::ActsClass::int8_int4: round_int_blocks(x, cols, 127.0f); break;
    case x86::ActsClass::int16_fp4: round_int_blocks(x, cols, 32767.0f); break;
    case x86::ActsClass::f32_even_odd:
    case x86::ActsClass::f32_plain:
    case x86::ActsClass::f32_fp4:
    case x86::ActsClass::f32_int4:
    case x86::ActsClass::bf16x3: break;  // split exactly
  }
}

inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace nibble::test
