#include "convert/expert_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "format/block.h"
#include "format/element.h"
#include "util/error.h"

namespace nibble {

namespace {

constexpr int kCastWindow = kMxfp4ToNvfp4Window;

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

bool same_values(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Row r of a BF16 or F32 matrix as f32 ([cols]).
void load_float_row(const ExpertSource& src, int64_t r, float* y) {
  if (src.format == Format::bf16) {
    const uint8_t* p = src.data + r * src.cols * 2;
    for (int64_t i = 0; i < src.cols; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      y[i] = bf16_decode(h);
    }
  } else {
    std::memcpy(y, src.data + r * src.cols * 4, size_t(src.cols) * 4);
  }
}

// The cast itself is format/'s; what it cannot tell us is whether a block it
// had to re-quantize still holds the same values (an all-zero block does), so
// those blocks are checked here. They are rare: none in DeepSeek-V4-Flash.
ExpertStats cast_rows(const ExpertSource& src, int k_max, int64_t r0, int64_t r1, uint8_t* out_packed,
                      uint8_t* out_scales) {
  const int64_t cols = src.cols;
  const int64_t mx_row = cols / kMxfp4Block, nv_row = cols / kNvfp4Block;
  const uint8_t* packed = src.data + r0 * (cols / 2);
  const uint8_t* scales = src.scales + r0 * mx_row;
  CastStats cs = mxfp4_to_nvfp4(packed, scales, r1 - r0, cols, k_max, out_packed, out_scales);
  ExpertStats st;
  st.blocks = cs.blocks;
  st.exact = cs.exact;
  st.requantized = cs.requantized;
  st.max_abs_error = cs.max_abs_error;
  if (cs.requantized == 0) return st;
  const float s_g = mxfp4_to_nvfp4_global_scale(k_max);
  float a[kMxfp4Block], b[kMxfp4Block];
  for (int64_t r = 0; r < r1 - r0; ++r) {
    for (int64_t j = 0; j < mx_row; ++j) {
      const uint8_t e = scales[r * mx_row + j];
      if (k_max - (int(e) - 127) <= kCastWindow) continue;
      const int64_t byte0 = r * (cols / 2) + j * (kMxfp4Block / 2);
      mxfp4_dequantize_row(packed + byte0, &e, kMxfp4Block, a);
      nvfp4_dequantize_row(out_packed + byte0, out_scales + r * nv_row + 2 * j, kMxfp4Block, s_g, b);
      if (same_values(a, b, kMxfp4Block)) ++st.exact;
    }
  }
  return st;
}

// The UE8M0 code of s_b * s_g when the block's two E4M3 halves share one
// scale code and that product is exactly 2^k with k in UE8M0's range; -1
// otherwise. Both factors are powers of two here, so the f32 product is exact.
int cast_block_code(const uint8_t* half_scales, float global_scale) {
  if (half_scales[0] != half_scales[1] || (half_scales[0] & 0x7F) == 0x7F) return -1;
  const float s = e4m3_decode(half_scales[0]) * global_scale;
  if (!(s > 0) || !std::isfinite(s)) return -1;
  int e = 0;
  if (std::frexp(s, &e) != 0.5f) return -1;  // s = 0.5 * 2^e
  const int k = e - 1;
  return k < -127 || k > 127 ? -1 : k + 127;
}

// nvfp4 -> mxfp4 with restore_cast_blocks: blocks the lossless cast wrote
// get their MX bytes back, the others go through the re-quantizer one block
// at a time.
ExpertStats nv_to_mx_restoring_rows(const ExpertSource& src, int64_t r0, int64_t r1, uint8_t* out_packed,
                                    uint8_t* out_scales) {
  const int64_t cols = src.cols, mx_row = cols / kMxfp4Block, nv_row = cols / kNvfp4Block;
  ExpertStats st;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < mx_row; ++b) {
      const uint8_t* in = src.data + r * (cols / 2) + b * (kMxfp4Block / 2);
      const uint8_t* in_scales = src.scales + r * nv_row + 2 * b;
      uint8_t* out = out_packed + (r - r0) * (cols / 2) + b * (kMxfp4Block / 2);
      uint8_t* out_scale = out_scales + (r - r0) * mx_row + b;
      ++st.blocks;
      const int code = cast_block_code(in_scales, src.global_scale);
      if (code >= 0) {
        std::memcpy(out, in, kMxfp4Block / 2);
        *out_scale = uint8_t(code);
        ++st.exact;
        continue;
      }
      CastStats cs;
      try {
        cs = nvfp4_to_mxfp4(in, in_scales, 1, kMxfp4Block, src.global_scale, out, out_scale);
      } catch (const Error& e) {
        fail("row ", r, ", block ", b, " (columns ", b * kMxfp4Block, "..", b * kMxfp4Block + kMxfp4Block - 1,
             "): ", e.what());
      }
      st.exact += cs.exact;
      st.requantized += 1;
      st.max_abs_error = std::max(st.max_abs_error, cs.max_abs_error);
    }
  return st;
}

ExpertStats nv_to_mx_rows(const ExpertSource& src, int64_t r0, int64_t r1, uint8_t* out_packed,
                          uint8_t* out_scales) {
  const int64_t cols = src.cols;
  CastStats cs = nvfp4_to_mxfp4(src.data + r0 * (cols / 2), src.scales + r0 * (cols / kNvfp4Block), r1 - r0,
                                cols, src.global_scale, out_packed, out_scales);
  ExpertStats st;
  st.blocks = cs.blocks;
  st.exact = cs.exact;
  st.requantized = cs.blocks;  // every block goes through the MXFP4 quantizer
  st.max_abs_error = cs.max_abs_error;
  return st;
}

ExpertStats float_rows(const ExpertSource& src, ExpertOp op, float global_scale, int64_t r0, int64_t r1,
                       uint8_t* out_packed, uint8_t* out_scales) {
  const int64_t cols = src.cols;
  const int64_t block = expert_op_block(op);
  const int64_t scale_row = target_scale_row_bytes(op, cols);
  std::vector<float> x(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
  ExpertStats st;
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* p = out_packed + (r - r0) * (cols / 2);
    uint8_t* s = out_scales + (r - r0) * scale_row;
    load_float_row(src, r, x.data());
    try {
      if (op == ExpertOp::float_to_nvfp4) {
        nvfp4_quantize_row(x.data(), cols, global_scale, p, s);
        nvfp4_dequantize_row(p, s, cols, global_scale, back.data());
      } else {
        mxfp4_quantize_row(x.data(), cols, p, s);
        mxfp4_dequantize_row(p, s, cols, back.data());
      }
    } catch (const Error& e) {
      fail("row ", r, ": ", e.what());
    }
    for (int64_t b = 0; b < cols / block; ++b) {
      const double err = max_abs_diff(x.data() + b * block, back.data() + b * block, block);
      st.max_abs_error = std::max(st.max_abs_error, err);
      if (err == 0) ++st.exact;
    }
    st.blocks += cols / block;
    st.requantized += cols / block;
  }
  return st;
}

}  // namespace

const char* expert_op_name(ExpertOp op) {
  switch (op) {
    case ExpertOp::mxfp4_to_nvfp4: return "mxfp4->nvfp4";
    case ExpertOp::nvfp4_to_mxfp4: return "nvfp4->mxfp4";
    case ExpertOp::float_to_nvfp4: return "float->nvfp4";
    case ExpertOp::float_to_mxfp4: return "float->mxfp4";
  }
  return "?";
}

int64_t expert_op_block(ExpertOp op) { return op == ExpertOp::float_to_nvfp4 ? kNvfp4Block : kMxfp4Block; }

void ExpertStats::merge(const ExpertStats& o) {
  blocks += o.blocks;
  exact += o.exact;
  requantized += o.requantized;
  max_abs_error = std::max(max_abs_error, o.max_abs_error);
}

int64_t target_packed_row_bytes(ExpertOp, int64_t cols) { return cols / 2; }

int64_t target_scale_row_bytes(ExpertOp op, int64_t cols) {
  const bool to_nv = op == ExpertOp::mxfp4_to_nvfp4 || op == ExpertOp::float_to_nvfp4;
  return cols / (to_nv ? kNvfp4Block : kMxfp4Block);
}

ExpertStats convert_expert_rows(const ExpertSource& src, ExpertOp op, const ExpertTargetParams& params,
                                int64_t r0, int64_t r1, uint8_t* out_packed, uint8_t* out_scales,
                                const std::string& tensor) {
  if (src.cols % kMxfp4Block != 0)
    fail("tensor ", tensor, ": ", src.cols, " columns is not a multiple of ", kMxfp4Block,
         ", which both FP4 block formats need");
  if (r0 < 0 || r1 > src.rows || r0 > r1) fail("tensor ", tensor, ": bad row range [", r0, ", ", r1, ")");
  try {
    switch (op) {
      case ExpertOp::mxfp4_to_nvfp4: return cast_rows(src, params.k_max, r0, r1, out_packed, out_scales);
      case ExpertOp::nvfp4_to_mxfp4:
        return params.restore_cast_blocks ? nv_to_mx_restoring_rows(src, r0, r1, out_packed, out_scales)
                                          : nv_to_mx_rows(src, r0, r1, out_packed, out_scales);
      case ExpertOp::float_to_nvfp4:
      case ExpertOp::float_to_mxfp4:
        return float_rows(src, op, params.global_scale, r0, r1, out_packed, out_scales);
    }
  } catch (const Error& e) {
    fail("tensor ", tensor, ": ", e.what());
  }
  return {};
}

ExponentRange mxfp4_matrix_exponent_range(const ExpertSource& src, const std::string& tensor) {
  const int64_t n = src.rows * (src.cols / kMxfp4Block);
  if (n <= 0) fail("tensor ", tensor, ".scale: no block scales");
  // Plain byte min / max: the compiler turns this into pminub / pmaxub over
  // 16+ codes per instruction. 0xFF (NaN) is the largest code, so it shows
  // up as the maximum; the format's scan then names the first one.
  uint8_t lo = 0xFF, hi = 0;
  const uint8_t* p = src.scales;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  if (hi == 0xFF) mxfp4_matrix_max_exponent(src, tensor);  // throws, naming the code's position
  return {int(lo) - 127, int(hi) - 127};
}

ExpertStats cast_scales_in_window(const ExpertSource& src, int k_max, int64_t r0, int64_t r1, uint8_t* out_scales,
                                  const std::string& tensor) {
  if (src.format != Format::mxfp4) fail("tensor ", tensor, ": the in-window cast needs an MXFP4 source");
  if (src.cols % kMxfp4Block != 0 || r0 < 0 || r1 > src.rows || r0 > r1)
    fail("tensor ", tensor, ": bad shape or row range [", r0, ", ", r1, ")");
  // table[e] = the two E4M3 codes that the cast writes for MX scale code e,
  // or 0 where the block would not be a byte copy (E4M3 code 0 is 0.0,
  // never a power of two, so 0 cannot be a real entry).
  uint16_t table[256] = {};
  const uint8_t zeros[kMxfp4Block / 2] = {};
  for (int d = 0; d <= kCastWindow; ++d) {
    const int e = 127 + k_max - d;
    if (e < 0 || e > 0xFE) continue;
    const uint8_t code = uint8_t(e);
    uint8_t packed[kMxfp4Block / 2], pair[2];
    CastStats cs;
    try {
      cs = mxfp4_to_nvfp4(zeros, &code, 1, kMxfp4Block, k_max, packed, pair);
    } catch (const Error& err) {
      fail("tensor ", tensor, ": ", err.what());
    }
    if (cs.exact != 1 || pair[0] == 0) fail("tensor ", tensor, ": block exponent ", e - 127, " is not cast exactly");
    std::memcpy(&table[code], pair, 2);
  }
  const int64_t per_row = src.cols / kMxfp4Block;
  const int64_t n = (r1 - r0) * per_row;
  const uint8_t* in = src.scales + r0 * per_row;
  bool bad = false;  // checked once after the loop, which then has no branch
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t v = table[in[i]];
    bad |= v == 0;
    std::memcpy(out_scales + 2 * i, &v, 2);
  }
  if (bad)
    for (int64_t i = 0; i < n; ++i)
      if (table[in[i]] == 0) {
        const int k = int(in[i]) - 127;
        fail("tensor ", tensor, ": block [", r0 + i / per_row, ", ", i % per_row, "] has ",
             in[i] == 0xFF ? std::string("the NaN scale code 0xFF")
                           : "exponent " + std::to_string(k) + ", outside the lossless window [" +
                                 std::to_string(k_max - kCastWindow) + ", " + std::to_string(k_max) + "]",
             " of a matrix planned as lossless");
      }
  ExpertStats st;
  st.blocks = st.exact = n;
  return st;
}

int mxfp4_matrix_max_exponent(const ExpertSource& src, const std::string& tensor) {
  try {
    return mxfp4_max_exponent(src.scales, src.rows * (src.cols / kMxfp4Block));
  } catch (const Error& e) {
    fail("tensor ", tensor, ".scale: ", e.what());
  }
}

float float_matrix_amax(const ExpertSource& src, const std::string& tensor) {
  const int64_t n = src.rows * src.cols;
  if (src.format == Format::bf16) {
    // For BF16, |x| orders like the integer (bits & 0x7FFF); 0x7F80 and above
    // are infinity and NaN.
    uint16_t top = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src.data + 2 * i, 2);
      h &= 0x7FFF;
      if (h >= 0x7F80)
        fail("tensor ", tensor, ": element ", i, " (row ", i / src.cols, ") is ",
             h == 0x7F80 ? "infinite" : "NaN", "; it cannot be quantized");
      top = std::max(top, h);
    }
    return bf16_decode(top);
  }
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, src.data + 4 * i, 4);
    if (!std::isfinite(v))
      fail("tensor ", tensor, ": element ", i, " (row ", i / src.cols, ") is ", v, "; it cannot be quantized");
    amax = std::max(amax, std::fabs(v));
  }
  return amax;
}

}  // namespace nibble
