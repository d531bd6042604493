// INT4 in the W4A16 layout, checked on the CPU (no GPU needed):
//  - repack then unpack gives back the stored bytes, bitwise, on awkward
//    shapes (rows not a multiple of 16, columns ending inside a 64-column
//    chunk), and padding holds code 8 (q = 0) and the BF16 scale 1.0;
//  - every lane's word, decoded by the kernel's bit trick and its exact BF16
//    subtraction of 136 (emulated here in f32, where it is exact too), times
//    the lane's scale as the kernel reads it, equals the scalar
//    dequantization (int4_dequantize_row) of the element the PTX m16n8k16
//    A-fragment layout puts there (table written from the ISA);
//  - the kernel's scale pointer arithmetic in bytes is 2 x scale_index.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/element.h"
#include "format/int4.h"
#include "kernels/cuda/w4a16_int4.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_repack.h"
#include "kernels/random_weights.h"
#include "util/error.h"

namespace nibble {
namespace {

using namespace w4a16;

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{1, 32}, {17, 96}, {40, 160}, {16, 64}, {33, 448}, {65, 2080}};

std::string label(const Shape& s) { return "int4 [" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "]"; }

// PTX ISA, fragment A of mma.m16n8k16 (.bf16): a0, a1, a4, a5 in row
// groupID, the others in groupID + 8; column tig * 2 + (i & 1), + 8 for
// a4..a7 (groupID = lane >> 2, tig = lane % 4).
struct Pos {
  int row, col;
};
Pos ptx_a_fragment(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  const bool lower_rows = i == 0 || i == 1 || i == 4 || i == 5;
  return {lower_rows ? group : group + 8, tig * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}

TEST(W4A16Int4, UnpackGivesBackTheStoredBytes) {
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(Format::int4, s.rows, s.cols, seed++);
    W4A16Matrix m = repack_w4a16(w.view);
    EXPECT_EQ(m.group, 32);
    EXPECT_EQ(m.global_scale, 1.0f);
    EXPECT_EQ(m.bytes(), w4a16_repacked_bytes(Format::int4, s.rows, s.cols)) << label(s);
    EXPECT_EQ(m.scales.size(), size_t(m.rows_padded * m.cols_padded / 32 * 2)) << label(s);
    std::vector<uint8_t> packed, scales;
    unpack_w4a16(m, packed, scales);
    ASSERT_EQ(packed.size(), w.data.size()) << label(s);
    ASSERT_EQ(scales.size(), w.scales.size()) << label(s);
    EXPECT_EQ(std::memcmp(packed.data(), w.data.data(), packed.size()), 0) << label(s);
    EXPECT_EQ(std::memcmp(scales.data(), w.scales.data(), scales.size()), 0) << label(s);
    // Padding: every code past the matrix is 8, every padded scale 1.0.
    uint64_t codes_in = 0, codes_out = 0;  // non-8 codes
    for (uint8_t b : w.data) codes_in += (b & 0xF) != 8, codes_in += (b >> 4) != 8;
    for (uint32_t word : m.words)
      for (int p = 0; p < 8; ++p) codes_out += ((word >> (4 * p)) & 0xF) != 8;
    EXPECT_EQ(codes_in, codes_out) << label(s);
    size_t ones_in = 0, ones_out = 0;
    for (size_t i = 0; i < w.scales.size(); i += 2) ones_in += w.scales[i] == 0x80 && w.scales[i + 1] == 0x3F;
    for (size_t i = 0; i < m.scales.size(); i += 2) ones_out += m.scales[i] == 0x80 && m.scales[i + 1] == 0x3F;
    EXPECT_EQ(ones_out, ones_in + (m.scales.size() - w.scales.size()) / 2) << label(s);
  }
}

// The kernel's per-lane value of A element i for k-tile j of chunk ch:
// dequant_int4x8_biased, minus 136 in BF16 (exact, so f32 gives the same),
// times the f32 scale of the element's row and 32-column group as the
// kernel indexes it (scale_index with 2-byte scales).
float kernel_value(const W4A16Matrix& m, int64_t strip, int64_t ch, int lane, int j, int i) {
  uint32_t regs[4];
  dequant_int4x8_biased(m.words[size_t(word_index(strip, ch, m.chunks(), lane, j))], regs);
  const uint16_t h = uint16_t(i & 1 ? regs[i / 2] >> 16 : regs[i / 2] & 0xFFFF);
  const float q = bf16_decode(h) - 136.0f;
  const int g = lane >> 2, half = (i >> 1) & 1, gi = j / 2;  // 2 k-tiles per 32-column group
  uint16_t sb;
  std::memcpy(&sb, &m.scales[2 * size_t(scale_index(strip, ch, m.chunks(), g, half, gi, 2))], 2);
  return q * bf16_scale_to_f32(sb);
}

TEST(W4A16Int4, DecodedFragmentsMatchTheScalarDequantization) {
  uint64_t seed = 20;
  for (const Shape& s : kShapes) {
    OwnedWeights w = random_weights(Format::int4, s.rows, s.cols, seed++);
    std::vector<float> deq(size_t(s.rows * s.cols));
    for (int64_t r = 0; r < s.rows; ++r)
      int4_dequantize_row(w.data.data() + r * (s.cols / 2), reinterpret_cast<const uint16_t*>(w.scales.data()) + r * (s.cols / 32),
                          s.cols, 32, deq.data() + r * s.cols);
    W4A16Matrix m = repack_w4a16(w.view);
    for (int64_t strip = 0; strip < m.rows_padded / 16; ++strip)
      for (int64_t ch = 0; ch < m.chunks(); ++ch)
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < 4; ++j)
            for (int i = 0; i < 8; ++i) {
              const Pos p = ptx_a_fragment(lane, i);
              const int64_t r = strip * 16 + p.row, c = ch * 64 + j * 16 + p.col;
              const float got = kernel_value(m, strip, ch, lane, j, i);
              const float want = r < s.rows && c < s.cols ? deq[size_t(r * s.cols + c)] : 0.0f;
              ASSERT_EQ(got, want) << label(s) << " strip " << strip << " chunk " << ch << " lane " << lane
                                   << " tile " << j << " a" << i;
            }
  }
}

TEST(W4A16Int4, DequantTrickCoversEveryCode) {
  for (uint32_t c = 0; c < 16; ++c)
    for (int pos = 0; pos < 8; ++pos) {
      // The other nibbles hold 8 (q = 0), as padding does.
      uint32_t word = 0x88888888u & ~(0xFu << (4 * pos));
      word |= c << (4 * pos);
      uint32_t regs[4];
      dequant_int4x8_biased(word, regs);
      for (int e = 0; e < 8; ++e) {
        const uint16_t h = uint16_t(e & 1 ? regs[e / 2] >> 16 : regs[e / 2] & 0xFFFF);
        const float want = nibble_position(e) == pos ? float(int(c) - 8) : 0.0f;
        EXPECT_EQ(bf16_decode(h) - 136.0f, want) << "code " << c << " nibble " << pos << " element " << e;
      }
    }
  // The BF16 constants the kernel's fma uses.
  EXPECT_EQ(bf16_decode(uint16_t(kBf16x2One & 0xFFFF)), 1.0f);
  EXPECT_EQ(bf16_decode(uint16_t(kBf16x2Minus136 >> 16)), -136.0f);
  EXPECT_EQ(bf16_decode(kInt4PadScale), 1.0f);
}

TEST(W4A16Int4, KernelScalePointerArithmeticIsScaleIndex) {
  // moe_w4a16.cuh with kInt4: base + (strip*n_chunks*16*gpc + g*2*gpc) * 2 +
  // ch*16*gpc*2, then 16-bit scale half*gpc + gi of the lane's 8 bytes.
  for (int64_t strip : {0, 3})
    for (int64_t ch = 0; ch < 5; ++ch)
      for (int g = 0; g < 8; ++g)
        for (int half = 0; half < 2; ++half)
          for (int gi = 0; gi < 2; ++gi)
            EXPECT_EQ(2 * scale_index(strip, ch, 5, g, half, gi, 2),
                      (strip * 5 * 16 * 2 + g * 2 * 2) * 2 + ch * 16 * 2 * 2 + 2 * (half * 2 + gi));
}

TEST(W4A16Int4, RejectsOtherGroupSizes) {
  OwnedWeights w = random_weights(Format::int4, 4, 128, 3);
  WeightView v = w.view;
  v.group = 64;  // a valid INT4 layout, but not the kernels'
  v.name = "layers.3.mlp.experts.5.down_proj";
  try {
    repack_w4a16(v);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.3.mlp.experts.5.down_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
