// Host repacking into the tensor-core linear kernels' layout (mma_layout.h):
// a permutation of FP8 / BF16 elements, nothing rounded, plus the FP8 tile
// scales widened to f32 (exact: UE8M0 is a power of two, f32 stays f32).
#include "kernels/cuda/mma_repack.h"

#include <cmath>
#include <cstring>

#include "format/element.h"
#include "kernels/cuda/mma_layout.h"
#include "util/error.h"

namespace nibble {

using namespace mma;

namespace {

bool is_fp8(Format f) { return f == Format::fp8_block128; }

void check_format(const WeightView& w) {
  if (w.format != Format::fp8_block128 && w.format != Format::bf16)
    fail(w.name, ": the tensor-core linear kernels take FP8 block-128 or BF16 weights, not ", format_name(w.format));
  if (w.rows <= 0 || w.cols <= 0) fail(w.name, ": empty matrix [", w.rows, ", ", w.cols, "]");
}

MmaMatrix empty_layout(Format format, int64_t rows, int64_t cols) {
  MmaMatrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  m.rows_padded = round_up(rows, kTileRows);
  m.cols_padded = round_up(cols, chunk_k(is_fp8(format)));
  if (is_fp8(format)) {
    m.row_blocks = (rows + kScaleBlock - 1) / kScaleBlock;
    m.col_blocks = (cols + kScaleBlock - 1) / kScaleBlock;
  }
  return m;
}

}  // namespace

int64_t MmaMatrix::chunks() const { return cols_padded / chunk_k(is_fp8(format)); }

uint64_t mma_word_bytes(Format format, int64_t rows, int64_t cols) {
  const MmaMatrix m = empty_layout(format, rows, cols);
  return uint64_t(m.rows_padded) * uint64_t(m.cols_padded) * (is_fp8(format) ? 1 : 2);
}

uint64_t mma_scale_bytes(Format format, int64_t rows, int64_t cols) {
  const MmaMatrix m = empty_layout(format, rows, cols);
  return uint64_t(m.row_blocks) * uint64_t(m.col_blocks) * 4;
}

std::vector<float> mma_scales(const WeightView& w) {
  check_format(w);
  if (!is_fp8(w.format)) return {};
  const MmaMatrix m = empty_layout(w.format, w.rows, w.cols);
  std::vector<float> s(size_t(m.row_blocks * m.col_blocks));
  for (size_t i = 0; i < s.size(); ++i) {
    float v;
    if (w.fp8_scale == Fp8ScaleType::ue8m0) {
      v = w.scales[i] == 0xFF ? NAN : ue8m0_decode(w.scales[i]);
    } else {
      std::memcpy(&v, w.scales + 4 * i, 4);
    }
    if (!(v > 0.0f) || !std::isfinite(v))
      fail(w.name, ": FP8 tile scale [", int64_t(i) / m.col_blocks, ", ", int64_t(i) % m.col_blocks, "] is ", v,
           " (must be a positive finite number)");
    s[i] = v;
  }
  return s;
}

void repack_mma_strips(const WeightView& w, int64_t strip0, int64_t strip1, uint8_t* out) {
  check_format(w);
  const MmaMatrix m = empty_layout(w.format, w.rows, w.cols);
  const int64_t n_chunks = m.chunks(), ck = chunk_k(is_fp8(w.format));
  if (strip0 < 0 || strip1 < strip0 || strip1 > m.rows_padded / kTileRows)
    fail(w.name, ": strips [", strip0, ", ", strip1, ") outside 0..", m.rows_padded / kTileRows);
  std::memset(out, 0, size_t((strip1 - strip0) * n_chunks * 32 * kLaneBytes));
  for (int64_t s = strip0; s < strip1; ++s)
    for (int64_t ch = 0; ch < n_chunks; ++ch)
      for (int lane = 0; lane < 32; ++lane) {
        uint8_t* word = out + lane_offset(s - strip0, ch, n_chunks, lane);
        for (int j = 0; j < ck / kTileK; ++j)
          for (int e = 0; e < 8; ++e) {
            const int64_t r = s * kTileRows + fragment_row(lane, e);
            const int64_t c = ch * ck + j * kTileK + fragment_col(lane, e);
            if (r >= w.rows || c >= w.cols) continue;  // padding stays 0
            if (is_fp8(w.format)) {
              const uint8_t code = w.data[r * w.cols + c];
              if ((code & 0x7F) == 0x7F)
                fail(w.name, ": FP8 element [", r, ", ", c, "] is the E4M3 NaN code 0x", std::hex, int(code));
              word[fp8_byte(j, e)] = code;
            } else {
              std::memcpy(word + 2 * bf16_half(e), w.data + 2 * (r * w.cols + c), 2);
            }
          }
      }
}

MmaMatrix repack_mma(const WeightView& w) {
  check_format(w);
  MmaMatrix m = empty_layout(w.format, w.rows, w.cols);
  m.words.resize(size_t(m.rows_padded / kTileRows * m.chunks() * 32 * kLaneBytes));
  repack_mma_strips(w, 0, m.rows_padded / kTileRows, m.words.data());
  m.scales = mma_scales(w);
  return m;
}

void unpack_mma(const MmaMatrix& m, std::vector<uint8_t>& data) {
  const bool fp8 = is_fp8(m.format);
  const int64_t n_chunks = m.chunks(), ck = chunk_k(fp8), esize = fp8 ? 1 : 2;
  data.assign(size_t(m.rows * m.cols * esize), 0);
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      // The inverse of the fragment map: row r%16 = g + 8*half, column
      // c%16 = 2t + bit + 8*hi; element e = 4 hi + 2 half + bit.
      const int rr = int(r % kTileRows), cc = int(c % kTileK);
      const int g = rr % 8, half = rr / 8, t = (cc % 8) / 2, bit = cc % 2, hi = cc / 8;
      const int lane = g * 4 + t, e = hi * 4 + half * 2 + bit;
      const int j = int((c % ck) / kTileK);
      const uint8_t* word = m.words.data() + lane_offset(r / kTileRows, c / ck, n_chunks, lane);
      if (fp8) data[size_t(r * m.cols + c)] = word[fp8_byte(j, e)];
      else std::memcpy(&data[size_t(2 * (r * m.cols + c))], word + 2 * bf16_half(e), 2);
    }
}

}  // namespace nibble
