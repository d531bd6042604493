// The W4A16 repacked layout, checked on the CPU (no GPU needed):
//  - repack then unpack gives back the stored bytes, bitwise, on awkward
//    shapes (rows not a multiple of 16, columns not a multiple of 64);
//  - every lane's word, decoded by the kernel's own bit trick, holds exactly
//    the E2M1 values the PTX ISA's m16n8k16 A-fragment layout puts there
//    (the table below is written from the ISA, not from the layout header);
//  - the kernel's arithmetic (per-group partial products scaled in f32),
//    emulated on the host from the repacked bytes, matches linear_ref.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "format/element.h"
#include "kernels/random_weights.h"
#include "kernels/cuda/moe_w4a16.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/linear.h"
#include "util/error.h"

namespace nibble {
namespace {

using namespace w4a16;

struct Shape {
  Format format;
  int64_t rows, cols;
};

// Awkward on purpose: 1 row, rows just past a strip, columns that end
// mid-chunk (one MXFP4 group, one and three NVFP4 groups past a chunk).
const Shape kShapes[] = {
    {Format::mxfp4, 1, 32},   {Format::mxfp4, 17, 96},  {Format::mxfp4, 40, 160}, {Format::mxfp4, 16, 64},
    {Format::mxfp4, 33, 448}, {Format::nvfp4, 1, 16},   {Format::nvfp4, 7, 48},   {Format::nvfp4, 31, 208},
    {Format::nvfp4, 48, 128}, {Format::nvfp4, 65, 80},
};

std::string label(const Shape& s) {
  return std::string(format_name(s.format)) + " [" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "]";
}

TEST(W4A16Repack, UnpackGivesBackTheStoredBytes) {
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, seed++);
    W4A16Matrix m = repack_w4a16(w.view);
    EXPECT_EQ(m.rows_padded % 16, 0);
    EXPECT_EQ(m.cols_padded % 64, 0);
    EXPECT_EQ(m.bytes(), w4a16_repacked_bytes(s.format, s.rows, s.cols)) << label(s);
    std::vector<uint8_t> packed, scales;
    unpack_w4a16(m, packed, scales);
    const size_t n_scales = size_t(s.rows * s.cols / (s.format == Format::mxfp4 ? 32 : 16));
    ASSERT_EQ(packed.size(), size_t(s.rows * s.cols / 2)) << label(s);
    ASSERT_EQ(scales.size(), n_scales) << label(s);
    EXPECT_EQ(std::memcmp(packed.data(), w.data.data(), packed.size()), 0) << label(s);
    EXPECT_EQ(std::memcmp(scales.data(), w.scales.data(), n_scales), 0) << label(s);
    if (s.format == Format::nvfp4) {
      EXPECT_EQ(m.global_scale, w.view.global_scale);
    }
  }
}

TEST(W4A16Repack, EveryCodeAndScaleLandsOnce) {
  // A permutation: each stored nibble appears once in the words, padding
  // holds zeros; each scale once, padding holds the neutral code.
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 99);
    W4A16Matrix m = repack_w4a16(w.view);
    uint64_t nonzero_in = 0, nonzero_out = 0;
    for (uint8_t b : w.data) nonzero_in += (b & 0xF) != 0, nonzero_in += (b >> 4) != 0;
    for (uint32_t word : m.words)
      for (int p = 0; p < 8; ++p) nonzero_out += ((word >> (4 * p)) & 0xF) != 0;
    EXPECT_EQ(nonzero_in, nonzero_out) << label(s);
    const uint8_t neutral = s.format == Format::mxfp4 ? 127 : 0x38;
    size_t neutral_in = 0, neutral_out = 0;
    for (uint8_t c : w.scales) neutral_in += c == neutral;
    for (uint8_t c : m.scales) neutral_out += c == neutral;
    const size_t padding = m.scales.size() - w.scales.size();
    EXPECT_EQ(neutral_out, neutral_in + padding) << label(s);
  }
}

// PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type",
// fragment A (.bf16): element a_i of lane L sits at
//   row    = groupID        for a0, a1, a4, a5;  groupID + 8 for a2, a3, a6, a7
//   column = threadID_in_group * 2 + (i & 1)  for a0..a3;  + 8 for a4..a7
// with groupID = L >> 2, threadID_in_group = L % 4; registers hold
// {a0,a1}, {a2,a3}, {a4,a5}, {a6,a7}, lower index in the low 16 bits.
struct Pos {
  int row, col;
};
Pos ptx_a_fragment(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  const bool lower_rows = i == 0 || i == 1 || i == 4 || i == 5;
  return {lower_rows ? group : group + 8, tig * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}

uint8_t code_at(const OwnedWeights& w, int64_t r, int64_t c) {
  if (r >= w.view.rows || c >= w.view.cols) return 0;
  const uint8_t b = w.data[size_t(r * (w.view.cols / 2) + c / 2)];
  return (c & 1) ? b >> 4 : b & 0xF;
}

TEST(W4A16Layout, DecodedFragmentsMatchThePtxLayout) {
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 7);
    W4A16Matrix m = repack_w4a16(w.view);
    for (int64_t strip = 0; strip < m.rows_padded / 16; ++strip)
      for (int64_t ch = 0; ch < m.chunks(); ++ch)
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < 4; ++j) {
            uint32_t regs[4];
            dequant_fp4x8(m.words[size_t(word_index(strip, ch, m.chunks(), lane, j))], regs);
            for (int i = 0; i < 8; ++i) {
              const uint16_t h = uint16_t(i & 1 ? regs[i / 2] >> 16 : regs[i / 2] & 0xFFFF);
              // dequant_fp4x8 yields E2M1 * 2^-126; the kernel multiplies by
              // 2^126 in BF16, exact: here in f32 (both exact).
              const float got = bf16_decode(h) * std::ldexp(1.0f, 126);
              const Pos p = ptx_a_fragment(lane, i);
              const float want = e2m1_decode(code_at(w, strip * 16 + p.row, ch * 64 + j * 16 + p.col));
              ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
                  << label(s) << " strip " << strip << " chunk " << ch << " lane " << lane << " tile " << j
                  << " a" << i << ": " << got << " vs " << want;
            }
          }
  }
}

TEST(W4A16Layout, DequantTrickCoversEveryCode) {
  // All 16 codes in every nibble position, -0 and the subnormal 0.5 included.
  for (uint32_t c = 0; c < 16; ++c)
    for (int pos = 0; pos < 8; ++pos) {
      uint32_t regs[4];
      dequant_fp4x8(c << (4 * pos), regs);
      // nibble_position inverts the register walk: element e reads nibble
      // nibble_position(e).
      for (int e = 0; e < 8; ++e) {
        const uint16_t h = uint16_t(e & 1 ? regs[e / 2] >> 16 : regs[e / 2] & 0xFFFF);
        const float got = bf16_decode(h) * std::ldexp(1.0f, 126);
        const float want = nibble_position(e) == pos ? e2m1_decode(uint8_t(c)) : 0.0f;
        EXPECT_EQ(std::signbit(got), std::signbit(want) && nibble_position(e) == pos) << c << " " << pos << " " << e;
        EXPECT_EQ(std::fabs(got), std::fabs(want)) << "code " << c << " nibble " << pos << " element " << e;
      }
    }
}

TEST(W4A16Layout, ScaleDecodersMatchTheFormatCodecs) {
  for (uint32_t c = 0; c < 256; ++c) {
    if (c != 0xFF) {
      EXPECT_EQ(ue8m0_to_f32(c), ue8m0_decode(uint8_t(c))) << c;
    }
    if ((c & 0x7F) != 0x7F) {
      const float got = e4m3_to_f32(c), want = e4m3_decode(uint8_t(c));
      EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << c << ": " << got << " vs " << want;
    }
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(0xFF)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
}

TEST(W4A16Layout, KernelScalePointerArithmeticIsScaleIndex) {
  // moe_w4a16.cuh steps its scale pointer as base + ch*16*gpc + g*2*gpc and
  // reads byte half*gpc + gi from there; that must be scale_index.
  for (int gpc : {2, 4})
    for (int64_t strip : {0, 3})
      for (int64_t ch = 0; ch < 5; ++ch)
        for (int g = 0; g < 8; ++g)
          for (int half = 0; half < 2; ++half)
            for (int gi = 0; gi < gpc; ++gi)
              EXPECT_EQ(scale_index(strip, ch, 5, g, half, gi, gpc),
                        strip * 5 * 16 * gpc + ch * 16 * gpc + g * 2 * gpc + half * gpc + gi);
  // and its weight pointer as base + strip*n_chunks*32 + lane + ch*32 uint4s.
  for (int64_t ch = 0; ch < 5; ++ch)
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(word_index(2, ch, 5, lane, 0), 4 * (2 * 5 * 32 + ch * 32 + lane));
}

// The kernel's arithmetic on the host, from the repacked bytes only: per
// 16x16 tile the A fragment (PTX table above) times 8 tokens' B, summed per
// scale group in f32 (what the tensor core accumulates), then scaled by the
// group's f32 scale and added to the f32 accumulator.
std::vector<float> emulate(const W4A16Matrix& m, const std::vector<float>& xb, int64_t n) {
  const int gpc = m.groups_per_chunk(), tiles_per_group = m.group / 16;
  std::vector<float> y(size_t(n * m.rows), 0.0f);
  for (int64_t strip = 0; strip < m.rows_padded / 16; ++strip)
    for (int64_t tok = 0; tok < n; ++tok) {
      float acc[16] = {};
      for (int64_t ch = 0; ch < m.chunks(); ++ch) {
        float part[16] = {};
        for (int j = 0; j < 4; ++j) {
          for (int lane = 0; lane < 32; ++lane) {
            uint32_t regs[4];
            dequant_fp4x8(m.words[size_t(word_index(strip, ch, m.chunks(), lane, j))], regs);
            for (int i = 0; i < 8; ++i) {
              const uint16_t h = uint16_t(i & 1 ? regs[i / 2] >> 16 : regs[i / 2] & 0xFFFF);
              const Pos p = ptx_a_fragment(lane, i);
              part[p.row] += bf16_decode(h) * std::ldexp(1.0f, 126) * xb[size_t(tok * m.cols_padded + ch * 64 + j * 16 + p.col)];
            }
          }
          if ((j + 1) % tiles_per_group == 0) {
            const int gi = j / tiles_per_group;
            for (int r = 0; r < 16; ++r) {
              const uint8_t code = m.scales[size_t(scale_index(strip, ch, m.chunks(), r % 8, r / 8, gi, gpc))];
              const float sc = m.format == Format::mxfp4 ? ue8m0_to_f32(code) : e4m3_to_f32(code) * m.global_scale;
              acc[r] += part[r] * sc;
              part[r] = 0;
            }
          }
        }
      }
      for (int r = 0; r < 16; ++r)
        if (strip * 16 + r < m.rows) y[size_t(tok * m.rows + strip * 16 + r)] = acc[r];
    }
  return y;
}

TEST(W4A16Layout, EmulatedKernelArithmeticMatchesLinearRef) {
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 11);
    W4A16Matrix m = repack_w4a16(w.view);
    const int64_t n = 3;
    std::vector<float> x(size_t(n * s.cols));
    random_normal(x.data(), int64_t(x.size()), 5);
    // The kernel's activations are BF16: round here, and give linear_ref
    // the same rounded values, so only the summation order differs.
    std::vector<float> xb(size_t(n * m.cols_padded), 0.0f);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < s.cols; ++c) {
        float& v = x[size_t(t * s.cols + c)];
        v = bf16_decode(bf16_encode(v));
        xb[size_t(t * m.cols_padded + c)] = v;
      }
    std::vector<float> ref(size_t(n * s.rows));
    linear_ref(w.view, x.data(), n, ref.data(), nullptr);
    std::vector<float> got = emulate(m, xb, n);
    std::vector<float> row(size_t(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      dequantize_row(w.view, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        // f32 sums of cols terms: |error| <= cols * 2^-24 * sum |w x| (plus
        // the scale product's one rounding), against an f64 reference.
        double mag = 0;
        for (int64_t c = 0; c < s.cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(t * s.cols + c)]);
        const double bound = (double(s.cols) + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
        EXPECT_LE(std::fabs(double(got[size_t(t * s.rows + r)]) - ref[size_t(t * s.rows + r)]), bound)
            << label(s) << " row " << r << " token " << t;
      }
    }
  }
}

TEST(W4A16Repack, RejectsWhatItCannotLayOut) {
  OwnedWeights bf = random_weights(Format::bf16, 4, 64, 1);
  bf.view.name = "layers.0.ffn.experts.3.w1";
  try {
    repack_w4a16(bf.view);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.3.w1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  OwnedWeights mx = random_weights(Format::mxfp4, 4, 64, 1);
  mx.view.cols = 48;  // not a multiple of 32
  mx.view.name = "w";
  EXPECT_THROW(repack_w4a16(mx.view), Error);
}

TEST(MoeW4A16Plan, VariantAndSplitFollowTheShapes) {
  EXPECT_EQ(moe_w4a16_tokens_per_pass(1), 8);
  EXPECT_EQ(moe_w4a16_tokens_per_pass(8), 8);
  EXPECT_EQ(moe_w4a16_tokens_per_pass(9), 32);
  // DeepSeek-V4-Flash decode on an H200 (132 SMs): 6 experts x 128 strips of
  // w1 = 768 busy warps, 2112 wanted -> 3 splits of K = 4096 (64 chunks).
  EXPECT_EQ(moe_w4a16_k_splits(6 * 128, 4096, 132), 3);
  // Enough strips: no split. Few columns: at most chunks / 4.
  EXPECT_EQ(moe_w4a16_k_splits(256 * 128, 4096, 132), 1);
  EXPECT_EQ(moe_w4a16_k_splits(1, 512, 132), 2);
  EXPECT_EQ(moe_w4a16_k_splits(1, 64, 132), 1);
  // Never more than 8, never below 1.
  EXPECT_EQ(moe_w4a16_k_splits(1, 1 << 16, 132), 8);
  EXPECT_EQ(moe_w4a16_k_splits(0, 4096, 132), 1);
}

}  // namespace
}  // namespace nibble
