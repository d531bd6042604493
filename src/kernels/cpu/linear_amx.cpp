// AMX-BF16 linear kernels (Sapphire Rapids and later): Y[n, rows] = X · W^T
// for MXFP4, NVFP4, BF16 and FP8 block-128 (UE8M0 scales) weights on the
// tile unit, with exact products.
//
// Why it can be exact. Every MXFP4 weight (E2M1 x 2^k), every NVFP4 weight
// before its global scale (E2M1 x E4M3: at most 6 significant bits), every
// FP8 weight with a power-of-two scale (E4M3 x 2^k: 4 bits) is a BF16
// number, and so is every BF16 weight. (FP8 with f32 scales is not: those
// run on the FMA kernels.) An f32 activation x splits
// into three BF16 numbers, hi = bf16(x), mid = bf16(x - hi),
// lo = x - hi - mid, with hi + mid + lo == x exactly (round to nearest even
// leaves at most 16 significant bits in x - hi and 8 in x - hi - mid). A
// BF16 x BF16 product is exact in f32, so w·x = w·hi + w·mid + w·lo is
// computed from exact products; only the f32 accumulation rounds, as in the
// FMA kernels. Three tile products per weight tile still cost less than
// the FMA path from 16 tokens on (kAmxMinTokens): the tile unit does
// 16 x 16 x 32 multiply-adds per TDPBF16PS, ~16 times an AVX-512 FMA's work
// per cycle, and decoding the weight tile costs about as much as its three
// products for 16 tokens.
//
// Rounding. Each output accumulates its hi products in one f32 tile (C_hi)
// and its mid and lo products in another (C_lo, ~2^-8 of C_hi's magnitude,
// so its roundings are ~2^-8 as large); the output is (C_hi + C_lo) x the
// NVFP4 global scale x alpha. A TDPBF16PS rounds to nearest even and
// flushes denormal inputs and results to zero (it ignores MXCSR): products
// below 2^-126 are lost, far below any weight x activation of a real model.
//
// Operands. A (16 x 32 BF16) holds 16 tokens' activations for 32 columns
// of one plane, from the prepared rows (ActsClass::bf16x3: per token the
// hi, mid and lo planes, each round_up(cols, 32) BF16, zero-padded),
// compacted tile-major per chunk of token groups. B (16 x 16
// dwords) holds 16 weight rows for the same 32 columns in the tile unit's
// pair layout: row k of B, dword n = weight row n's columns 2k and 2k+1.
// FP4 codes arrive two per byte (byte k of a row's 16 bytes = columns 2k,
// 2k+1), so a 16 x 16 byte transpose of the packed codes gives B's pairs
// directly; a table lookup (vpermw) turns each nibble into its BF16 E2M1
// value, and the row's block scale finishes the weight exactly (MXFP4: an
// exponent add; NVFP4: an f32 multiply). FP8 codes (one per byte) go through the same byte transpose, two
// columns to a dword, and become BF16 by moving their exponent field. BF16
// rows are transposed as 16 x 16 dwords.
//
// Blocking. A pass covers 32 weight rows (two B tiles) and 16 tokens (one
// A tile per plane): 4 accumulator tiles (C_hi, C_lo per B), 2 B tiles and 2
// A tiles alternating. The first token group decodes each weight tile into
// `wbuf` just before using it (the vector ports decode while the tile unit
// multiplies); later groups load the decoded tiles from wbuf (L2).
//
// Batch invariance: the tile unit computes each output from its own row of
// A and column of B, in k order; a token's result does not depend on the
// other tokens of its group or call, nor on the rows beside it. It does
// differ, in the last bits, from the FMA kernels', which the caller
// (linear_cpu.cpp) runs below kAmxMinTokens tokens: the backend as a whole
// is not batch invariant (registry.cpp says so).
//
// Only <immintrin.h>, <cstdint>, kernels_x86.h and simd_avx512.h here (see
// kernels_x86.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/cpu/simd_avx512.h"

namespace nibble::x86 {

namespace {

constexpr int64_t kTileK = 32;  // columns per tile
constexpr int64_t kTileBytes = 1024;

// Tile registers (GCC's tile intrinsics paste their register number into
// the asm text, so the numbers are written out below): 0 C_hi and 1 C_lo of
// B tile 0, 2 C_hi and 3 C_lo of B tile 1, 4 and 5 the B tiles, 6 and 7 A.

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Every tile 16 rows of 64 bytes (C: 16 tokens x 16 f32; B: 16 pairs x 16
// dwords; A: 16 tokens x 32 BF16).
void load_tile_config() {
  TileConfig c{};
  c.palette = 1;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

// The BF16 bits of the 16 E2M1 values, in the low 16 words (vpermw reads
// the index's low 5 bits; codes are < 16).
inline __m512i e2m1_bf16_table() {
  return _mm512_setr_epi32(0x3F000000, 0x3FC03F80, 0x40404000, 0x40C04080,  // 0, .5, 1, 1.5, 2, 3, 4, 6
                           int32_t(0xBF008000), int32_t(0xBFC0BF80), int32_t(0xC040C000), int32_t(0xC0C0C080),
                           0, 0, 0, 0, 0, 0, 0, 0);
}

// Index vectors of the 16 x 16 byte transpose below. Round 1: for rows
// 0..7 (two vectors of 4 rows) and 8..15, the bytes of pairs k = 4q..4q+3
// go to (q % 2) * 32 + (k % 4) * 8 + (n % 8); `r1_lo` serves q = 0, 1 and
// `r1_hi` q = 2, 3. Round 2: output vector q (pairs 4q..4q+3) takes
// (k % 4) * 16 + n from the round-1 vector of rows 0..7 (n < 8) or 8..15;
// `r2_lo` picks q even. `spread[kk]`: byte n of 128-bit lane kk to bytes 4n
// and 4n + 2 (words 2n and 2n + 1 of the result; the others are masked).
struct ByteIndex {
  alignas(64) uint8_t r1_lo[64] = {}, r1_hi[64] = {}, r2_lo[64] = {}, r2_hi[64] = {};
  alignas(64) uint8_t spread[4][64] = {};
  // `pair[h]`: bytes n of lanes 2h and 2h + 1 to bytes 4n and 4n + 2 (two
  // neighbouring columns of row n as the words of dword n).
  alignas(64) uint8_t pair[2][64] = {};
  constexpr ByteIndex() {
    for (int h = 0; h < 2; ++h)
      for (int n = 0; n < 16; ++n) {
        pair[h][4 * n] = uint8_t(2 * h * 16 + n);
        pair[h][4 * n + 2] = uint8_t((2 * h + 1) * 16 + n);
      }
    for (int q = 0; q < 4; ++q)
      for (int kk = 0; kk < 4; ++kk)
        for (int n = 0; n < 8; ++n) {
          const int k = 4 * q + kk;
          const uint8_t src = uint8_t((n < 4 ? 0 : 64) + (n % 4) * 16 + k);
          (q < 2 ? r1_lo : r1_hi)[(q % 2) * 32 + kk * 8 + n] = src;
        }
    for (int qq = 0; qq < 2; ++qq)
      for (int kk = 0; kk < 4; ++kk)
        for (int n = 0; n < 16; ++n)
          (qq == 0 ? r2_lo : r2_hi)[kk * 16 + n] = uint8_t((n < 8 ? 0 : 64) + qq * 32 + kk * 8 + (n % 8));
    for (int kk = 0; kk < 4; ++kk)
      for (int n = 0; n < 16; ++n) spread[kk][4 * n] = spread[kk][4 * n + 2] = uint8_t(kk * 16 + n);
  }
};
constexpr ByteIndex kByteIndex;

// 16 rows of 16 bytes, row n at p + n * ld: the bytes lm selects (the
// rest `fill`), rows from nr on all `fill`.
inline __m128i byte_row(const uint8_t* p, int64_t ld, int64_t n, int64_t nr, __mmask16 lm, __m128i fill) {
  return n < nr ? _mm_mask_loadu_epi8(fill, lm, p + n * ld) : fill;
}
inline __m512i four_byte_rows(const uint8_t* p, int64_t ld, int64_t n0, int64_t nr, __mmask16 lm, __m128i fill) {
  __m512i v = _mm512_castsi128_si512(byte_row(p, ld, n0, nr, lm, fill));
  v = _mm512_inserti32x4(v, byte_row(p, ld, n0 + 1, nr, lm, fill), 1);
  v = _mm512_inserti32x4(v, byte_row(p, ld, n0 + 2, nr, lm, fill), 2);
  return _mm512_inserti32x4(v, byte_row(p, ld, n0 + 3, nr, lm, fill), 3);
}

// The 16 x 16 byte transpose of those rows, two rounds of vpermt2b (VBMI):
// lane kk of o[q] holds byte 4q + kk of every row (row n at byte n).
inline void transpose_byte_rows(const uint8_t* p, int64_t ld, int64_t nr, __mmask16 lm, __m128i fill, __m512i* o) {
  const __m512i a0 = four_byte_rows(p, ld, 0, nr, lm, fill), a1 = four_byte_rows(p, ld, 4, nr, lm, fill);
  const __m512i a2 = four_byte_rows(p, ld, 8, nr, lm, fill), a3 = four_byte_rows(p, ld, 12, nr, lm, fill);
  const __m512i x1lo = _mm512_load_si512(kByteIndex.r1_lo), x1hi = _mm512_load_si512(kByteIndex.r1_hi);
  const __m512i x2lo = _mm512_load_si512(kByteIndex.r2_lo), x2hi = _mm512_load_si512(kByteIndex.r2_hi);
  const __m512i p01 = _mm512_permutex2var_epi8(a0, x1lo, a1), p23 = _mm512_permutex2var_epi8(a0, x1hi, a1);
  const __m512i q01 = _mm512_permutex2var_epi8(a2, x1lo, a3), q23 = _mm512_permutex2var_epi8(a2, x1hi, a3);
  o[0] = _mm512_permutex2var_epi8(p01, x2lo, q01);
  o[1] = _mm512_permutex2var_epi8(p01, x2hi, q01);
  o[2] = _mm512_permutex2var_epi8(p23, x2lo, q23);
  o[3] = _mm512_permutex2var_epi8(p23, x2hi, q23);
}

// One B row (pair k = 4q + kk) of an FP4 tile from the transposed codes
// `o` (vector q): dword n = BF16 E2M1 values of row n's columns 2k, 2k+1,
// unscaled.
template <int kk>
inline __m512i fp4_pair_row(__m512i o, __m512i table) {
  const __m512i b = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, _mm512_load_si512(kByteIndex.spread[kk]), o);
  // words 2n, 2n+1 = byte n: low nibble for the even column, high for the odd.
  const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(b, _mm512_set1_epi32(0x00040000)), _mm512_set1_epi16(0x000F));
  return _mm512_permutexvar_epi16(idx, table);
}

// The row's scale on both BF16 halves of each dword: an exact f32 multiply
// (the product is again a BF16 number), back to BF16 by dropping the zero
// low bits.
inline __m512i scale_pairs_mul(__m512i v, __m512 s) {
  const __m512i high_word = _mm512_set1_epi32(int32_t(0xFFFF0000));
  const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), s);
  const __m512 odd = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high_word)), s);
  return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(even), 16),
                         _mm512_and_si512(_mm512_castps_si512(odd), high_word));
}

// The same for a power-of-two scale 2^d given as d << 7 in both words
// (`exp_add`): the exponent field of every nonzero value moves by d. Exact
// while the results stay normal: MXFP4 scale exponents 2..252.
inline __m512i scale_pairs_exp(__m512i v, __m512i exp_add) {
  const __mmask32 nonzero = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
  return _mm512_mask_add_epi16(v, nonzero, v, exp_add);
}

// Per 32-row pass, the scales of every tile, ahead of the tiles (so a tile
// reads its 16 rows' scales with one load): FP4 `scale[kt][half][32 rows]`,
// half 0 for pairs 0..7, 1 for 8..15 (NVFP4 blocks of 16; MXFP4 the same
// scale twice), as f32; MXFP4 also `exp_add[kt][32]`, (e - 127) << 7 in both
// words. Returns whether every MXFP4 scale allows the exponent path.
struct PassScales {
  float* scale;
  int32_t* exp_add;
};

template <bool kNv>
bool pass_scales(const RawWeights& w, int64_t r, int64_t nr, int64_t kts, PassScales ps) {
  // Each 16-row half's scale bytes transposed 16 at a time, so every tile
  // position's 16 rows come out as one vector.
  const int64_t ld = kNv ? w.cols / 16 : w.cols / 32;  // scale bytes per row
  __m512i lo_e = _mm512_set1_epi32(127), hi_e = _mm512_set1_epi32(127);  // MXFP4 exponent range seen
  alignas(64) uint8_t t[256];
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t nb = nr - 16 * b < 0 ? 0 : nr - 16 * b > 16 ? 16 : nr - 16 * b;
    const uint8_t* p = w.scales + (r + 16 * b) * ld;
    for (int64_t j0 = 0; j0 < ld; j0 += 16) {
      const int64_t len = ld - j0 < 16 ? ld - j0 : 16;
      const __mmask16 lm = len == 16 ? __mmask16(0xFFFF) : __mmask16((1u << len) - 1);
      // Missing rows and bytes: MXFP4 exponent 127 (inside the range), NVFP4 0.
      __m512i o[4];
      transpose_byte_rows(p + j0, ld, nb, lm, _mm_set1_epi8(kNv ? 0 : 127), o);
      for (int q = 0; q < 4; ++q) _mm512_store_si512(t + 64 * q, o[q]);
      for (int64_t j = 0; j < len; ++j) {
        const __m128i bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(t + 16 * j));
        if (kNv) {
          // byte j0 + j is half (j0 + j) % 2 of tile (j0 + j) / 2; E4M3 to
          // f32 through f16 (e4m3_hi_to_f16: the value times 2^-8).
          const __m256i hi_bytes = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
          const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_hi_to_f16(hi_bytes)), _mm512_set1_ps(256.0f));
          const int64_t kt = (j0 + j) / 2, half = (j0 + j) % 2;
          _mm512_store_ps(ps.scale + (kt * 2 + half) * 32 + 16 * b, v);
        } else {
          // 2^(e-127) as the float with exponent field e (e = 0 gives 0, as
          // mx_scales does, simd_avx512.h), and (e - 127) << 7 per word.
          const __m512i e = _mm512_cvtepu8_epi32(bytes);
          const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
          const int64_t kt = j0 + j;
          _mm512_store_ps(ps.scale + (kt * 2 + 0) * 32 + 16 * b, v);
          _mm512_store_ps(ps.scale + (kt * 2 + 1) * 32 + 16 * b, v);
          const __m512i d = _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(127)), 7),
                                             _mm512_set1_epi32(0xFFFF));
          _mm512_store_si512(ps.exp_add + kt * 32 + 16 * b, _mm512_or_si512(d, _mm512_slli_epi32(d, 16)));
          lo_e = _mm512_min_epi32(lo_e, e);
          hi_e = _mm512_max_epi32(hi_e, e);
        }
      }
    }
    // NVFP4 with cols % 32 == 16: the last tile has no second half.
    if (kNv && ld % 2 == 1) _mm512_store_ps(ps.scale + ((kts - 1) * 2 + 1) * 32 + 16 * b, _mm512_setzero_ps());
  }
  return kNv || (_mm512_reduce_min_epi32(lo_e) >= 2 && _mm512_reduce_max_epi32(hi_e) <= 252);
}

// B tile b (rows r + 16b ..) of FP4 weights for columns [32 kt, 32 kt + 32)
// into tile[16 x 16 dwords]; `nr` rows of this tile exist.
template <bool kNv>
void fp4_b_tile(const RawWeights& w, int64_t r, int64_t nr, int64_t kt, int b, const PassScales& ps,
                bool exp_path, uint32_t* tile) {
  const int64_t ld = w.cols / 2;
  const __mmask16 lm = w.cols - kt * kTileK >= kTileK ? __mmask16(0xFFFF) : __mmask16(0x00FF);
  const uint8_t* p = w.data + r * ld + kt * 16;
  __m512i o[4];
  transpose_byte_rows(p, ld, nr, lm, _mm_setzero_si128(), o);
  const __m512i table = e2m1_bf16_table();
  const float* sc = ps.scale + kt * 64 + 16 * b;
  const __m512 s_lo = _mm512_load_ps(sc), s_hi = _mm512_load_ps(sc + 32);
  const __m512i e_add = kNv ? _mm512_setzero_si512() : _mm512_load_si512(ps.exp_add + kt * 32 + 16 * b);
  auto put = [&](int k, __m512i v) {
    if (!kNv && exp_path) v = scale_pairs_exp(v, e_add);
    else v = scale_pairs_mul(v, k < 8 ? s_lo : s_hi);
    _mm512_store_si512(tile + 16 * k, v);
  };
  for (int q = 0; q < 4; ++q) {
    put(4 * q + 0, fp4_pair_row<0>(o[q], table));
    put(4 * q + 1, fp4_pair_row<1>(o[q], table));
    put(4 * q + 2, fp4_pair_row<2>(o[q], table));
    put(4 * q + 3, fp4_pair_row<3>(o[q], table));
  }
}

// E4M3 codes (the low byte of each word) to BF16 bits, exactly: normal
// codes by moving the exponent field (bias 7 -> 127), subnormals (m x 2^-9)
// from a table; the NaN codes 0x7F / 0xFF read as +-480, as in the FMA
// kernels (simd_avx512.h: e4m3_hi_to_f16).
inline __m512i e4m3_to_bf16(__m512i c) {
  const __m512i sub_table = _mm512_setr_epi32(0x3B000000, 0x3BC03B80, 0x3C203C00, 0x3C603C40, 0, 0, 0, 0, 0, 0, 0, 0,
                                              0, 0, 0, 0);
  const __m512i normal =
      _mm512_add_epi16(_mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x7F)), 4), _mm512_set1_epi16(0x3C00));
  const __mmask32 sub = _mm512_testn_epi16_mask(c, _mm512_set1_epi16(0x78));  // exponent field 0
  const __m512i v = _mm512_mask_permutexvar_epi16(normal, sub, _mm512_and_si512(c, _mm512_set1_epi16(7)), sub_table);
  return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x80)), 8));
}

// B tile of FP8 block-128 weights with UE8M0 scales, rows [r, r + nr)
// (nr <= 16), columns [32 kt, 32 kt + 32) (past w.cols: zero). A tile lies
// in one 128-column scale tile; its rows span at most two 128-row bands.
// The scale 2^(e-127) multiplies exactly (E4M3 has 4 significant bits):
// as an exponent add where every result stays normal, else in f32.
void fp8_b_tile(const RawWeights& w, int64_t r, int64_t nr, int64_t kt, uint32_t* tile) {
  const int64_t ld = w.cols, left = w.cols - kt * kTileK;
  const __mmask16 m0 = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  const __mmask16 m1 = left >= 32 ? __mmask16(0xFFFF) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
  const uint8_t* p = w.data + r * ld + kt * kTileK;
  __m512i lo[4], hi[4];  // columns 0..15 and 16..31, transposed
  transpose_byte_rows(p, ld, nr, m0, _mm_setzero_si128(), lo);
  transpose_byte_rows(p + 16, ld, nr, m1, _mm_setzero_si128(), hi);
  // The scales of the (at most two) bands: rows from `split` on are in the
  // second.
  const int64_t tiles = (w.cols + 127) / 128, band = r / 128;
  const int64_t split = (band + 1) * 128 - r;  // >= 1
  const uint32_t ea = w.scales[band * tiles + kt / 4];
  const uint32_t eb = split < nr ? w.scales[(band + 1) * tiles + kt / 4] : ea;
  const __mmask16 second = split >= 16 ? __mmask16(0) : __mmask16(0xFFFF << split);
  const bool exp_path = ea >= 10 && ea <= 246 && eb >= 10 && eb <= 246;
  const __m512i e = _mm512_mask_mov_epi32(_mm512_set1_epi32(int32_t(ea)), second, _mm512_set1_epi32(int32_t(eb)));
  const __m512i d = _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(127)), 7),
                                     _mm512_set1_epi32(0xFFFF));
  const __m512i e_add = _mm512_or_si512(d, _mm512_slli_epi32(d, 16));
  // 2^(e-127) in f32 for the other path, with ue8m0_value's ends: e = 0 is
  // 2^-127 (subnormal), e = 255 NaN.
  auto scale_of = [](uint32_t x) {
    return x == 0 ? bits_to_float(0x00400000u) : x == 255 ? bits_to_float(0x7FC00000u) : bits_to_float(x << 23);
  };
  const __m512 s = _mm512_mask_mov_ps(_mm512_set1_ps(scale_of(ea)), second, _mm512_set1_ps(scale_of(eb)));
  const __m512i pair0 = _mm512_load_si512(kByteIndex.pair[0]), pair1 = _mm512_load_si512(kByteIndex.pair[1]);
  for (int k = 0; k < 16; ++k) {
    // Pair k: columns 2k, 2k + 1, lanes (2k % 16) and +1 of vector (2k % 16) / 4.
    const __m512i src = k < 8 ? lo[(2 * k) / 4] : hi[(2 * k - 16) / 4];
    const __m512i c = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, (k % 2) ? pair1 : pair0, src);
    __m512i v = e4m3_to_bf16(c);
    v = exp_path ? scale_pairs_exp(v, e_add) : scale_pairs_mul(v, s);
    _mm512_store_si512(tile + 16 * k, v);
  }
}

// B tile of BF16 weight rows [r, r + nr), columns [32 kt, 32 kt + 32)
// (columns past w.cols read as zero): the rows' dwords transposed.
void bf16_b_tile(const RawWeights& w, int64_t r, int64_t nr, int64_t kt, uint32_t* tile) {
  const int64_t left = w.cols - kt * kTileK;
  const __mmask32 lm = left >= kTileK ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << left) - 1);
  __m512i v[16];
  for (int64_t n = 0; n < 16; ++n)
    v[n] = n < nr ? _mm512_maskz_loadu_epi16(lm, w.data + ((r + n) * w.cols + kt * kTileK) * 2)
                  : _mm512_setzero_si512();
  // 16 x 16 dword transpose: 32-bit, 64-bit interleaves, then 128-bit lane
  // shuffles twice.
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4g + j], g = row group of 4, j = dword j of each 128-bit lane (lane L
  // holds column 4L + j of rows 4g..4g+3).
  for (int j = 0; j < 4; ++j) {
    // Lanes 0,1 of g = 0,1 and of g = 2,3; then lanes 2,3.
    const __m512i a01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);       // g0 L0 L1, g1 L0 L1
    const __m512i a23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);  // g2 L0 L1, g3 L0 L1
    const __m512i b01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);       // g0 L2 L3, g1 L2 L3
    const __m512i b23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    // Column 4L + j: lane L of every group, groups in order.
    t[j] = _mm512_shuffle_i32x4(a01, a23, 0x88);       // L0: g0 g1 g2 g3
    t[4 + j] = _mm512_shuffle_i32x4(a01, a23, 0xDD);   // L1
    t[8 + j] = _mm512_shuffle_i32x4(b01, b23, 0x88);   // L2
    t[12 + j] = _mm512_shuffle_i32x4(b01, b23, 0xDD);  // L3
  }
  // t[4L + j] is column (pair) 4L + j.
  for (int k = 0; k < 16; ++k) _mm512_store_si512(tile + 16 * k, t[k]);
}

// One token's bf16x3 planes from x[cols].
void split_token(const float* x, int64_t cols, uint16_t* out) {
  const int64_t kp = round_up(cols, kTileK);
  for (int64_t c = 0; c < kp; c += 16) {
    const int64_t left = cols - c;
    const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + c);
    const __m256bh hi = _mm512_cvtneps_pbh(v);
    const __m512 r1 = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(__m256i(hi)), 16)));
    const __m256bh mid = _mm512_cvtneps_pbh(r1);
    const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(__m256i(mid)), 16)));
    const __m256bh lo = _mm512_cvtneps_pbh(r2);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + c), __m256i(hi));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + kp + c), __m256i(mid));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 2 * kp + c), __m256i(lo));
  }
}

// Outputs of one pass: tokens [t0, t0 + nt) x rows [r, r + nr) from the
// accumulator tiles (chi/clo for rows r..r+15, then r+16..r+31).
void store_pass(const RowsOut& out, const float* chi, const float* clo, int64_t t0, int64_t nt, int64_t r,
                int64_t nr, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t b = 0; b < 2 && 16 * b < nr; ++b) {
    const int64_t rows = nr - 16 * b < 16 ? nr - 16 * b : 16;
    const __mmask16 m = rows == 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t t = t0 + i;
      const int64_t yi = out.y_index ? out.y_index[t] : t;
      float* y = out.y + yi * out.ldy + r + 16 * b;
      __m512 v = _mm512_add_ps(_mm512_load_ps(chi + b * 256 + 16 * i), _mm512_load_ps(clo + b * 256 + 16 * i));
      v = _mm512_mul_ps(v, sc);
      if (out.alpha) v = _mm512_mul_ps(v, _mm512_set1_ps(out.alpha[t]));
      if (out.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), v);
      _mm512_mask_storeu_ps(y, m, v);
    }
  }
}

}  // namespace

int64_t amx_acts_stride(int64_t cols) { return 3 * round_up(cols, kTileK) * 2; }

void amx_prepare_acts(const float* x, int64_t n, int64_t cols, uint8_t* out) {
  const int64_t stride = amx_acts_stride(cols);
  for (int64_t t = 0; t < n; ++t) split_token(x + t * cols, cols, reinterpret_cast<uint16_t*>(out + t * stride));
}

namespace {

// Token groups (of 16) per chunk, up to 4: each chunk decodes every weight
// tile once, so fewer, larger chunks decode less. The chunk's compacted A
// tiles (96 bytes per token and padded column) may spill from L2 to L3: at
// 16384 columns (1.5 MB per group) 4 groups per chunk instead of 1 took 64
// tokens from 255-293 ms to 162-169 ms on 2 threads (a 16384^2 MXFP4
// matrix), and 4096 columns did not slow down.
int64_t chunk_groups(int64_t cols) {
  const int64_t per_group = 16 * 3 * round_up(cols, kTileK) * 2;
  const int64_t g = (int64_t(6) << 20) / per_group;
  return g < 1 ? 1 : g > 4 ? 4 : g;
}

}  // namespace

int64_t amx_weight_scratch_bytes(int64_t cols) {
  const int64_t kts = round_up(cols, kTileK) / kTileK;
  return kts * (2 * kTileBytes + 2 * 32 * 4 + 32 * 4);  // B tiles, scale, exp_add
}

int64_t amx_token_scratch_bytes(int64_t cols) { return chunk_groups(cols) * 16 * 3 * round_up(cols, kTileK) * 2; }

bool amx_tokens_fit_one_chunk(int64_t n, int64_t cols) { return n <= 16 * chunk_groups(cols); }

void amx_rows(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a, const RowsOut& out,
              uint8_t* wbuf, uint8_t* tbuf, bool tokens_ready) {
  if (r1 <= r0 || a.n <= 0) return;
  load_tile_config();
  const int64_t kp = round_up(w.cols, kTileK), kts = kp / kTileK;
  const int64_t plane = kp * 2;  // bytes per plane of one prepared token
  const float scale = w.kind == WeightKind::nvfp4 ? w.global_scale : 1.0f;
  const bool nv = w.kind == WeightKind::nvfp4, fp4 = nv || w.kind == WeightKind::mxfp4;
  uint8_t* tiles = wbuf;
  const PassScales ps{reinterpret_cast<float*>(wbuf + kts * 2 * kTileBytes),
                      reinterpret_cast<int32_t*>(wbuf + kts * (2 * kTileBytes + 256))};
  const int64_t cg = chunk_groups(w.cols);
  alignas(64) float chi[512], clo[512];
  for (int64_t c0 = 0; c0 < a.n; c0 += 16 * cg) {
    const int64_t groups = (a.n - c0 + 15) / 16 < cg ? (a.n - c0 + 15) / 16 : cg;
    // The chunk's A tiles, tile-major ([group][kt][plane] x 16 rows of 64
    // bytes, rows past the last token zero), so each tile load reads 1 KB in
    // order; kept from the previous row range when the caller says so.
    for (int64_t g = 0; g < groups && !(tokens_ready && c0 == 0); ++g)
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t t = c0 + 16 * g + i;
        const uint8_t* src = t < a.n ? a.data + (a.token_index ? a.token_index[t] : t) * a.stride : nullptr;
        for (int64_t kt = 0; kt < kts; ++kt)
          for (int64_t pl = 0; pl < 3; ++pl) {
            uint8_t* dst = tbuf + ((g * kts + kt) * 3 + pl) * kTileBytes + i * 64;
            _mm512_store_si512(dst, src ? _mm512_loadu_si512(src + pl * plane + kt * 64) : _mm512_setzero_si512());
          }
      }
    for (int64_t r = r0; r < r1; r += 32) {
      const int64_t nr = r1 - r < 32 ? r1 - r : 32;
      const int64_t nr0 = nr < 16 ? nr : 16, nr1 = nr - nr0;
      bool exp_path = false;
      if (fp4) exp_path = nv ? pass_scales<true>(w, r, nr, kts, ps) : pass_scales<false>(w, r, nr, kts, ps);
      for (int64_t g = 0; g < groups; ++g) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint8_t* ag = tbuf + g * kts * 3 * kTileBytes;
        for (int64_t kt = 0; kt < kts; ++kt) {
          uint32_t* b0 = reinterpret_cast<uint32_t*>(tiles + (2 * kt) * kTileBytes);
          uint32_t* b1 = reinterpret_cast<uint32_t*>(tiles + (2 * kt + 1) * kTileBytes);
          if (g == 0) {  // decoded once per pass, while the tiles multiply
            if (nv) {
              fp4_b_tile<true>(w, r, nr0, kt, 0, ps, false, b0);
              fp4_b_tile<true>(w, r + 16, nr1, kt, 1, ps, false, b1);
            } else if (fp4) {
              fp4_b_tile<false>(w, r, nr0, kt, 0, ps, exp_path, b0);
              fp4_b_tile<false>(w, r + 16, nr1, kt, 1, ps, exp_path, b1);
            } else if (w.kind == WeightKind::fp8_ue8m0) {
              fp8_b_tile(w, r, nr0, kt, b0);
              fp8_b_tile(w, r + 16, nr1, kt, b1);
            } else {
              bf16_b_tile(w, r, nr0, kt, b0);
              bf16_b_tile(w, r + 16, nr1, kt, b1);
            }
          }
          _tile_loadd(4, b0, 64);
          _tile_loadd(5, b1, 64);
          const uint8_t* at = ag + kt * 3 * kTileBytes;
          _tile_loadd(6, at, 64);  // hi
          _tile_dpbf16ps(0, 6, 4);
          _tile_dpbf16ps(2, 6, 5);
          _tile_loadd(7, at + kTileBytes, 64);  // mid
          _tile_dpbf16ps(1, 7, 4);
          _tile_dpbf16ps(3, 7, 5);
          _tile_loadd(6, at + 2 * kTileBytes, 64);  // lo
          _tile_dpbf16ps(1, 6, 4);
          _tile_dpbf16ps(3, 6, 5);
        }
        _tile_stored(0, chi, 64);
        _tile_stored(1, clo, 64);
        _tile_stored(2, chi + 256, 64);
        _tile_stored(3, clo + 256, 64);
        const int64_t t0 = c0 + 16 * g;
        store_pass(out, chi, clo, t0, a.n - t0 < 16 ? a.n - t0 : 16, r, nr, scale);
      }
    }
  }
  _tile_release();
}

}  // namespace nibble::x86
