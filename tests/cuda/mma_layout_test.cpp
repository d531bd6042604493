// The tensor-core linear layout (FP8 block-128, BF16), checked on the CPU:
//  - repack then unpack gives back the stored bytes, bitwise, on awkward
//    shapes (rows past a strip and a 128-row scale block, columns ending
//    mid-chunk and mid-scale-block), and the scales widen exactly;
//  - every lane's word, decoded by the kernel's own bit trick, holds the
//    values the PTX ISA's m16n8k16 A-fragment table (written out below from
//    the ISA text, not from the layout header) puts in each register;
//  - the E4M3 -> BF16 shift covers every code in both register halves;
//  - the kernel's arithmetic (per-chunk f32 partials scaled by the tile
//    scale), emulated from the repacked bytes, matches linear_ref within a
//    bound derived from f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/element.h"
#include "kernels/cuda/linear_mma.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/mma_repack.h"
#include "kernels/linear.h"
#include "kernels/random_weights.h"
#include "util/error.h"

namespace nibble {
namespace {

using namespace mma;

struct Shape {
  Format format;
  Fp8ScaleType scale;
  int64_t rows, cols;
};

const Shape kShapes[] = {
    {Format::fp8_block128, Fp8ScaleType::ue8m0, 1, 16},    {Format::fp8_block128, Fp8ScaleType::ue8m0, 17, 48},
    {Format::fp8_block128, Fp8ScaleType::ue8m0, 130, 200}, {Format::fp8_block128, Fp8ScaleType::f32, 33, 129},
    {Format::fp8_block128, Fp8ScaleType::f32, 256, 272},   {Format::bf16, Fp8ScaleType::ue8m0, 1, 8},
    {Format::bf16, Fp8ScaleType::ue8m0, 19, 40},           {Format::bf16, Fp8ScaleType::ue8m0, 64, 130},
};

std::string label(const Shape& s) {
  return std::string(format_name(s.format)) + (s.scale == Fp8ScaleType::f32 ? " f32-scale" : "") + " [" +
         std::to_string(s.rows) + ", " + std::to_string(s.cols) + "]";
}

uint64_t esize(Format f) { return f == Format::bf16 ? 2 : 1; }

// The scales as format/element decodes them: the independent oracle.
float stored_scale(const WeightView& w, int64_t i) {
  if (w.fp8_scale == Fp8ScaleType::ue8m0) return ue8m0_decode(w.scales[i]);
  float v;
  std::memcpy(&v, w.scales + 4 * i, 4);
  return v;
}

TEST(MmaLayout, RepackThenUnpackGivesTheStoredBytes) {
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 11, s.scale);
    MmaMatrix m = repack_mma(w.view);
    EXPECT_EQ(m.rows_padded % 16, 0) << label(s);
    EXPECT_EQ(m.cols_padded % (s.format == Format::bf16 ? 16 : 32), 0) << label(s);
    EXPECT_EQ(m.words.size(), mma_word_bytes(s.format, s.rows, s.cols)) << label(s);
    EXPECT_EQ(m.words.size(), uint64_t(m.rows_padded * m.cols_padded) * esize(s.format)) << label(s);
    std::vector<uint8_t> back;
    unpack_mma(m, back);
    ASSERT_EQ(back.size(), size_t(s.rows * s.cols) * esize(s.format)) << label(s);
    EXPECT_EQ(std::memcmp(back.data(), w.view.data, back.size()), 0) << label(s);
    // A permutation plus zero padding: as many non-zero bytes as stored.
    size_t nz_in = 0, nz_out = 0;
    for (size_t i = 0; i < back.size(); ++i) nz_in += w.view.data[i] != 0;
    for (uint8_t b : m.words) nz_out += b != 0;
    EXPECT_EQ(nz_in, nz_out) << label(s);
    if (s.format == Format::fp8_block128) {
      const int64_t blocks = ((s.rows + 127) / 128) * ((s.cols + 127) / 128);
      ASSERT_EQ(int64_t(m.scales.size()), blocks) << label(s);
      for (int64_t i = 0; i < blocks; ++i) EXPECT_EQ(m.scales[size_t(i)], stored_scale(w.view, i)) << label(s);
    } else {
      EXPECT_TRUE(m.scales.empty());
    }
  }
}

// PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type",
// fragment A (.bf16): a_i of lane L is at row groupID (a0, a1, a4, a5) or
// groupID + 8 (a2, a3, a6, a7), column threadID_in_group * 2 + (i & 1), + 8
// for a4..a7; registers {a0,a1}, {a2,a3}, {a4,a5}, {a6,a7}, lower index low.
struct Pos {
  int row, col;
};
Pos ptx_a_fragment(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  const bool lower_rows = i == 0 || i == 1 || i == 4 || i == 5;
  return {lower_rows ? group : group + 8, tig * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}

float stored_value(const OwnedWeights& w, int64_t r, int64_t c) {
  if (r >= w.view.rows || c >= w.view.cols) return 0.0f;
  if (w.view.format == Format::bf16) {
    uint16_t h;
    std::memcpy(&h, w.view.data + 2 * (r * w.view.cols + c), 2);
    return bf16_decode(h);
  }
  return e4m3_decode(w.view.data[r * w.view.cols + c]);
}

TEST(MmaLayout, DecodedFragmentsMatchThePtxLayout) {
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 5, s.scale);
    MmaMatrix m = repack_mma(w.view);
    const bool fp8 = s.format == Format::fp8_block128;
    const int ck = fp8 ? 32 : 16;
    for (int64_t strip = 0; strip < m.rows_padded / 16; ++strip)
      for (int64_t ch = 0; ch < m.chunks(); ++ch)
        for (int lane = 0; lane < 32; ++lane) {
          uint32_t q[4];
          std::memcpy(q, m.words.data() + lane_offset(strip, ch, m.chunks(), lane), 16);
          for (int j = 0; j < ck / 16; ++j) {
            uint32_t regs[4];
            if (fp8) dequant_fp8_tile(q, j, regs);
            else std::memcpy(regs, q, 16);
            for (int i = 0; i < 8; ++i) {
              const uint16_t h = uint16_t(i & 1 ? regs[i / 2] >> 16 : regs[i / 2] & 0xFFFF);
              // FP8: the shift gives E4M3 * 2^-120; the kernel's BF16 multiply
              // by 2^120 is exact, here done in f32 (also exact).
              const float got = bf16_decode(h) * (fp8 ? std::ldexp(1.0f, 120) : 1.0f);
              const Pos p = ptx_a_fragment(lane, i);
              const float want = stored_value(w, strip * 16 + p.row, ch * ck + j * 16 + p.col);
              ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
                  << label(s) << " strip " << strip << " chunk " << ch << " lane " << lane << " tile " << j << " a"
                  << i << ": " << got << " vs " << want;
            }
          }
        }
  }
}

TEST(MmaLayout, E4m3ShiftCoversEveryCodeInBothHalves) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN: refused at repack (below)
    for (int half = 0; half < 2; ++half) {
      const uint32_t r = dequant_e4m3x2(c << (8 * half));
      const uint16_t mine = uint16_t(half ? r >> 16 : r & 0xFFFF), other = uint16_t(half ? r & 0xFFFF : r >> 16);
      const float got = bf16_decode(mine) * std::ldexp(1.0f, 120), want = e4m3_decode(uint8_t(c));
      EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << "code " << c << " half " << half << ": " << got << " vs " << want;
      EXPECT_EQ(other, 0) << "code " << c << " leaks into the other half";
    }
  }
  // 2^120 as the kernel's BF16x2 constant, both halves.
  EXPECT_EQ(bf16_decode(uint16_t(kBf16x2Pow120 & 0xFFFF)), std::ldexp(1.0f, 120));
  EXPECT_EQ(bf16_decode(uint16_t(kBf16x2Pow120 >> 16)), std::ldexp(1.0f, 120));
}

TEST(MmaLayout, RefusesWhatItCannotLayOut) {
  OwnedWeights f4 = random_weights(Format::mxfp4, 16, 64, 1);
  f4.view.name = "blk.0.w1";
  EXPECT_THROW(
      {
        try {
          repack_mma(f4.view);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("blk.0.w1"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("mxfp4"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  OwnedWeights f8 = random_weights(Format::fp8_block128, 20, 40, 2);
  f8.view.name = "attn.wq_a";
  f8.data[size_t(3 * 40 + 7)] = 0xFF;  // E4M3 NaN at [3, 7]
  try {
    repack_mma(f8.view);
    ADD_FAILURE() << "a NaN code was repacked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.wq_a"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 7]"), std::string::npos) << e.what();
  }
  OwnedWeights f8s = random_weights(Format::fp8_block128, 20, 40, 3, Fp8ScaleType::f32);
  const float bad = -1.0f;
  std::memcpy(f8s.scales.data(), &bad, 4);
  EXPECT_THROW(repack_mma(f8s.view), Error);
}

// The kernel's arithmetic on the host, from the repacked bytes: per chunk,
// tiles of 16 products (exact in f32: 4- or 8-bit weights times 8-bit
// activations) summed in f32, the chunk partial times its f32 tile scale
// added to an f32 accumulator. Against linear_ref (f64 sums of exactly
// dequantized weights) on the same BF16 activations, with M = sum |w x|:
// at most cols + 2 * chunks + 2 roundings of 2^-23 each, so the bound is
// (cols + 2 * cols / 16 + 4) * 2^-23 * M.
TEST(MmaLayout, EmulatedKernelArithmeticMatchesLinearRef) {
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(s.format, s.rows, s.cols, 23, s.scale);
    MmaMatrix m = repack_mma(w.view);
    const bool fp8 = s.format == Format::fp8_block128;
    const int ck = fp8 ? 32 : 16;
    const int64_t n = 3;
    std::vector<float> x(size_t(n * s.cols));
    random_normal(x.data(), int64_t(x.size()), 99);
    for (float& v : x) v = bf16_decode(bf16_encode(v));
    std::vector<float> ref(size_t(n * s.rows)), wrow(size_t(s.cols));
    linear_ref(w.view, x.data(), n, ref.data(), nullptr);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < s.rows; ++r) {
        const int64_t strip = r / 16, rr = r % 16;
        float acc = 0.0f;
        for (int64_t ch = 0; ch < m.chunks(); ++ch) {
          float part = 0.0f;
          for (int64_t cc = 0; cc < ck; ++cc) {
            const int64_t c = ch * ck + cc;
            if (c >= s.cols) continue;
            const int j = int(cc / 16), k = int(cc % 16);
            // Find the lane/element holding (rr, k) through the ISA table.
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 8; ++i) {
                const Pos p = ptx_a_fragment(lane, i);
                if (p.row != rr || p.col != k) continue;
                uint32_t q[4], regs[4];
                std::memcpy(q, m.words.data() + lane_offset(strip, ch, m.chunks(), lane), 16);
                if (fp8) dequant_fp8_tile(q, j, regs);
                else std::memcpy(regs, q, 16);
                const uint16_t h = uint16_t(i & 1 ? regs[i / 2] >> 16 : regs[i / 2] & 0xFFFF);
                const float wv = bf16_decode(h) * (fp8 ? std::ldexp(1.0f, 120) : 1.0f);
                part += wv * x[size_t(t * s.cols + c)];
              }
          }
          const float sc = fp8 ? m.scales[size_t((r / 128) * m.col_blocks + (ch * ck) / 128)] : 1.0f;
          acc += part * sc;
        }
        dequantize_row(w.view, r, wrow.data());
        double mag = 0;
        for (int64_t c = 0; c < s.cols; ++c) mag += std::fabs(double(wrow[size_t(c)]) * x[size_t(t * s.cols + c)]);
        const double bound = (double(s.cols) + 2.0 * double(s.cols) / 16 + 4) * std::ldexp(1.0, -23) * mag + 1e-30;
        ASSERT_LE(std::fabs(double(acc) - double(ref[size_t(t * s.rows + r)])), bound)
            << label(s) << " token " << t << " row " << r;
      }
  }
}

TEST(MmaLayout, KSplitsFillTheGpuWithinLimits) {
  for (int64_t rows : {16, 512, 1024, 4096, 7168, 32768})
    for (int64_t chunks : {1, 8, 64, 128, 512})
      for (int sms : {1, 46, 132, 170}) {
        const int k = linear_mma_k_splits(rows, chunks, sms);
        const int64_t strips = rows / 16;
        EXPECT_GE(k, 1);
        EXPECT_LE(k, 16);
        // Never a split of fewer than 8 chunks, unless unsplit.
        if (k > 1) {
          EXPECT_GE(chunks / k, 8) << rows << " " << chunks << " " << sms;
        }
        // Either 16 warps per SM are reached or a limit (16 splits, 8 chunks each) stopped it.
        const bool filled = strips * k >= int64_t(sms) * 16;
        EXPECT_TRUE(filled || k == 16 || k == std::max<int64_t>(1, chunks / 8)) << rows << " " << chunks << " " << sms;
        // And not more splits than needed to fill: one fewer would not.
        if (k > 1) {
          EXPECT_LT(strips * (k - 1), int64_t(sms) * 16) << rows << " " << chunks << " " << sms;
        }
      }
}

}  // namespace
}  // namespace nibble
