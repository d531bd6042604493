// Host repacking into the W4A16 layout: a permutation of nibbles and scale
// bytes, nothing rounded (w4a16_layout.h has the layout and its reasons).
#include "kernels/cuda/w4a16_repack.h"

#include <cstring>

#include "kernels/cuda/w4a16_int4.h"
#include "kernels/cuda/w4a16_layout.h"
#include "util/error.h"

namespace nibble {

using namespace w4a16;

namespace {

// The scale code that decodes to exactly 1.0, for padding (INT4: its BF16
// 1.0 is two bytes, written by repack_w4a16).
uint8_t neutral_scale(Format f) { return f == Format::mxfp4 ? 127 : 0x38; }

int group_of(Format f) { return f == Format::nvfp4 ? 16 : 32; }
int scale_bytes_of(Format f) { return f == Format::int4 ? 2 : 1; }

W4A16Matrix empty_layout(Format format, int64_t rows, int64_t cols) {
  W4A16Matrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  m.rows_padded = round_up(rows, kTileRows);
  m.cols_padded = round_up(cols, kChunkK);
  m.group = group_of(format);
  return m;
}

}  // namespace

uint64_t w4a16_repacked_bytes(Format format, int64_t rows, int64_t cols) {
  W4A16Matrix m = empty_layout(format, rows, cols);
  return uint64_t(m.rows_padded) * uint64_t(m.cols_padded) / 2 + w4a16_scale_bytes(format, rows, cols);
}

uint64_t w4a16_scale_bytes(Format format, int64_t rows, int64_t cols) {
  W4A16Matrix m = empty_layout(format, rows, cols);
  return uint64_t(m.rows_padded) * uint64_t(m.cols_padded) / uint64_t(m.group) * uint64_t(scale_bytes_of(format));
}

W4A16Matrix repack_w4a16(const WeightView& w) {
  if (w.format != Format::mxfp4 && w.format != Format::nvfp4 && w.format != Format::int4)
    fail(w.name, ": the W4A16 tensor-core kernels take MXFP4, NVFP4 or INT4 weights, not ", format_name(w.format));
  if (w.format == Format::int4 && w.group != 32)
    fail(w.name, ": the W4A16 tensor-core kernels take INT4 with 32 elements per scale, not ", w.group);
  W4A16Matrix m = empty_layout(w.format, w.rows, w.cols);
  const bool int4 = w.format == Format::int4;
  if (w.rows <= 0 || w.cols <= 0 || w.cols % m.group != 0)
    fail(w.name, ": ", format_name(w.format), " matrix [", w.rows, ", ", w.cols, "] needs columns that are a positive multiple of ",
         m.group);
  m.global_scale = w.format == Format::nvfp4 ? w.global_scale : 1.0f;
  const int64_t strips = m.rows_padded / kTileRows, n_chunks = m.chunks();
  const int gpc = m.groups_per_chunk();
  const int64_t row_bytes = w.cols / 2, row_groups = w.cols / m.group;
  m.words.assign(size_t(strips * n_chunks * 32 * kTilesPerChunk), 0);
  if (int4) {
    m.scales.resize(size_t(strips * n_chunks * 16 * gpc) * 2);
    for (size_t i = 0; i < m.scales.size(); i += 2) std::memcpy(&m.scales[i], &kInt4PadScale, 2);  // little-endian
  } else {
    m.scales.assign(size_t(strips * n_chunks * 16 * gpc), neutral_scale(w.format));
  }
  auto code = [&](int64_t r, int64_t c) -> uint32_t {
    if (r >= w.rows || c >= w.cols) return int4 ? kInt4ZeroCode : 0;
    const uint8_t b = w.data[r * row_bytes + c / 2];
    return (c & 1) ? b >> 4 : b & 0xF;
  };
  for (int64_t s = 0; s < strips; ++s)
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kTilesPerChunk; ++j) {
          uint32_t word = 0;
          for (int e = 0; e < 8; ++e) {
            const int64_t r = s * kTileRows + fragment_row(lane, e);
            const int64_t c = ch * kChunkK + j * kTileK + fragment_col(lane, e);
            word |= code(r, c) << (4 * nibble_position(e));
          }
          m.words[size_t(word_index(s, ch, n_chunks, lane, j))] = word;
        }
      for (int g = 0; g < 8; ++g)
        for (int half = 0; half < 2; ++half)
          for (int gi = 0; gi < gpc; ++gi) {
            const int64_t r = s * kTileRows + g + 8 * half;
            const int64_t grp = (ch * kChunkK) / m.group + gi;
            if (r >= w.rows || grp >= row_groups) continue;
            const size_t at = size_t(scale_index(s, ch, n_chunks, g, half, gi, gpc));
            if (int4) std::memcpy(&m.scales[2 * at], w.scales + 2 * (r * row_groups + grp), 2);
            else m.scales[at] = w.scales[r * row_groups + grp];
          }
    }
  return m;
}

void unpack_w4a16(const W4A16Matrix& m, std::vector<uint8_t>& packed, std::vector<uint8_t>& scales) {
  const int64_t n_chunks = m.chunks(), row_groups = m.cols / m.group;
  const int gpc = m.groups_per_chunk();
  const size_t sb = size_t(scale_bytes_of(m.format));
  packed.assign(size_t(m.rows * m.cols / 2), 0);
  scales.assign(size_t(m.rows * row_groups) * sb, 0);
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      // Find the lane and element holding (r, c): the inverse of the
      // fragment map (row r%16 = g + 8*half, col c%16 = 2t + bit + 8*hi).
      const int rr = int(r % kTileRows), cc = int(c % kTileK);
      const int g = rr % 8, half = rr / 8, t = (cc % 8) / 2, bit = cc % 2, hi = cc / 8;
      const int lane = g * 4 + t, e = hi * 4 + half * 2 + bit;
      const int j = int((c % kChunkK) / kTileK);
      const uint32_t word = m.words[size_t(word_index(r / kTileRows, c / kChunkK, n_chunks, lane, j))];
      const uint8_t nib = uint8_t((word >> (4 * nibble_position(e))) & 0xF);
      packed[size_t(r * (m.cols / 2) + c / 2)] |= (c & 1) ? uint8_t(nib << 4) : nib;
    }
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t grp = 0; grp < row_groups; ++grp) {
      const int64_t ch = grp * m.group / kChunkK;
      const int gi = int(grp - ch * kChunkK / m.group);
      const int rr = int(r % kTileRows);
      const size_t at = size_t(scale_index(r / kTileRows, ch, n_chunks, rr % 8, rr / 8, gi, gpc));
      for (size_t b = 0; b < sb; ++b) scales[size_t(r * row_groups + grp) * sb + b] = m.scales[at * sb + b];
    }
}

}  // namespace nibble
