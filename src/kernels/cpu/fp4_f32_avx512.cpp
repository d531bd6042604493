// FP4 (MXFP4 / NVFP4) weights against f32 activations on AVX-512: the
// default FP4 path (the int8 one in linear_avx512.cpp is opt-in). Every
// product is exact (an E2M1 value has 2 significant bits, so E2M1 x f32 fits
// the FMA's exact product), block scales are powers of two (MXFP4) or E4M3
// values times a global f32 (NVFP4), and only the f32 accumulation rounds:
// the result is within 1e-5 relative L2 of the f64 reference, like the FP8
// and BF16 paths.
//
// Decoding. A 64-byte load holds 128 packed codes (4 MXFP4 blocks, 8 NVFP4
// blocks); dword j holds codes 8j .. 8j+7, code 8j+k in bits 4k .. 4k+3.
// vpermps reads only the low 4 bits of each dword index, so
//     W_k = vpermps(v >> 4k, E2M1 table of 16 f32),   k = 0 .. 7,
// are 16 f32 weights each, lane j = code 8j+k. Lane j stays in one block for
// every k (block j/4 of MXFP4, j/2 of NVFP4), so one vector per 128 weights
// holds every lane's block scale (mx_scales / nv_scales, simd_avx512.h).
// The byte-sized shifts come from the load ports: the 64 bytes loaded from
// p + b hold byte 4j+b in the low byte of dword j, i.e. code 8j+2b in bits
// 0-3 (what v >> 8b would give). So per 128 weights: 4 loads, 4 shifts by 4,
// 8 vpermps, and per token 8 FMAs. The last group of a row reads its
// shifted copies with masked loads, never past the row. One row at a time
// (one token) takes them from one load and 3 shifts by 8, 16, 24 instead:
// the 3 loads at p + 1..3 each straddle two cache lines, and on Zen 4 (one
// thread, resident 512 x 4096, load ~11) MXFP4 went 12.7 -> 14.4 GB/s per
// core with the shifts (NVFP4 12.6 either way; a Sapphire Rapids class Xeon,
// 2026-12-07: 14.6-14.9 against 13.7-13.9); with 4 rows (2-4 tokens) the
// loads stay (2 tokens: 11.1 against 10.8 GB/s with shifts), as they do for
// the four rows of a long row's one token (kLongRowBytes). The bytes, and
// so the results, are the same either way.
//
// Activations (ActsClass::f32_fp4): per group of 128 columns, 8 vectors of
// 16 f32, vector k lane j = x[8j + k], zero past cols (a row's tail is read
// with a masked load, so its missing codes are 0 and meet zeros).
//
// Scales. The 8 products of a group sum into a temporary per row and token
// (from the first, by a multiply), and one FMA applies the lane scales to
// add it into the accumulator (1 op per 8 FMAs).
//
// Batch invariance. A token's result must not depend on the batch it comes
// in (the number of tokens, its place among them, the rows a thread was
// given), so every (row, token) pair runs the same operations in the same
// order whatever T (tokens per call, 1..4) and R (rows per block) are: per
// group, tmp = w0 x0, tmp = fma(w_k, x_k, tmp) for k = 1..7, acc =
// fma(tmp, s, acc); per row, one fixed horizontal sum. T and R only change
// which pairs run side by side; nothing is summed across tokens or rows.
// (Before, R*T > 8 multiplied the scales into the weights instead, a
// different rounding.) At R*T = 12 or 16 the temporaries and accumulators
// outnumber the registers and GCC keeps the accumulators, touched once per
// group, on the stack; that still beats the scaled-weights form (one
// vmulps per weight vector): T = 3 / 4 at 8.0 / 5.7 GB/s against 7.0 /
// 5.6 (notes/batchinv.md). Fewer rows lose: R = 2 / 3 at T = 4 gave 5.3 /
// 4.7, one or two rows at a time within a block of 4 gave 4.6-4.9 (too few
// independent FMA chains).
//
// Blocking. R rows share every activation load: at 4 tokens the f32
// activations of a 4096-column row are 64 KB, past L1, and one row at a
// time would stream them from L2 once per row.
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

constexpr int64_t kCols = 128;  // columns per group: 64 bytes of codes

// Software prefetch distance: twice the other kernels' (simd_avx512.h).
// This path spends ~2x the int8 path's cycles per cache line, so 1 KB ahead
// covers too little DRAM latency: one thread streaming MXFP4 4096 x 4096
// from DRAM (bench --threads 1 --cpu-clock, 6 interleaved runs) reached
// 0.73 of the paired probe with 1 KB, 0.86 with 2 KB (4 KB: 0.74).
constexpr int64_t kFp4Prefetch = 2 * kPrefetch;

// One token also asks for the line 8 KB ahead into L2, so more of the
// stream is in flight than L1's fill buffers allow (one row at a time:
// rows are consumed in memory order; long rows side by side: 8 KB
// ahead is later in the same row, or in the next block). Two-thread MoE
// dsv4-flash MXFP4 batch 1, interleaved A/B on a noisy machine: median
// ratio 0.575 -> 0.616 (6 runs each) and 0.451 -> 0.506 (10 runs each);
// bench/RESULTS.md. For two long rows it is level (16384 x 16384: 0.76-0.81
// of the probe with it, 0.77-0.81 without). Passes of 2-4 tokens over
// shorter rows (the MoE's experts: 2 KB) ask for it too: their blocks of 4
// rows take 8 KB, so the line is the same one of the next block. Zen 5, 2
// threads from DRAM, 3 interleaved rounds, median ms (2026-12-08): MoE
// layer, every token on the same 6 experts (bench moe --routing shared), 3
// tokens 4.01-4.22 -> 3.32-3.47, 6 tokens 6.80-6.86 -> 6.21-6.27; NVFP4
// 4096^2 2 / 4 tokens 0.27-0.45 / 0.41-0.56 -> 0.27-0.28 / 0.37; resident
// (no DRAM to hide) 2-4% slower. Long rows (kLongRowBytes) at 2-4 tokens
// do without: 8 KB ahead is a row of the block in hand, and the next
// block's line (4 rows ahead) was slower (16384^2 NVFP4 2 tokens 4.0-4.2 ->
// 4.7).
constexpr int64_t kFp4PrefetchL2 = 8192;

// Rows per block for T tokens (registers: R*T accumulators, R*T
// temporaries, R scale vectors, the table). Measured (bench --resident, 256
// x 4096): one row at a time is fastest for one token (17 GB/s per core,
// the port limit: 26 vector ops per 128 weights; two rows gave 13), four
// rows for more (see above and bench/RESULTS.md).
template <int T>
constexpr int kRows = T == 1 ? 1 : 4;

// One token over rows of at least this many bytes runs kLongRows rows side
// by side instead: that many streams through memory 8 KB or more apart,
// where one row at a time keeps one. From DRAM on a 2-core Sapphire Rapids
// class Xeon (2 threads, 3 interleaved rounds, ratio to the paired probe),
// two rows: 16384 x 16384 MXFP4 0.62-0.66 -> 0.76-0.81, 1024 x 16384 0.57 ->
// 0.68-0.70; but at the MoE's 2 KB rows one row at a time stays ahead
// (layer 0.76-0.88 against 0.67-0.81), and 4 KB rows are level
// (bench/results/2230_avx512_spr_floors_and_tries.txt). On a Zen 5 EPYC
// (2026-12-08, 2 threads, 4 interleaved rounds, median ms at 16384 x
// 16384): one row 7.1-7.3 (MXFP4), two 4.3-4.8, four 3.7-4.1; NVFP4 two
// 4.9-5.2, four 4.0-4.3 (bench/results/0104_ops_vs_ggml_zen5_avx512.txt).
constexpr int64_t kLongRowBytes = 8192;
constexpr int kLongRows = 4;

// E2M1 code -> value (codes 8..15 are the negatives, 8 is -0).
inline __m512 e2m1_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                        -3.0f, -4.0f, -6.0f);
}

// Lane scales of group g of a row's scales (all of it, or the `rem` columns
// of a partial last group).
template <bool kNv>
inline __m512 group_scales(const uint8_t* srow, int64_t g, int64_t rem) {
  if constexpr (kNv) {
    if (rem == 0) return nv_scales(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(srow + 8 * g)));
    return nv_scales(_mm_maskz_loadu_epi8(__mmask16((1u << (rem / 16)) - 1), srow + 8 * g));
  } else {
    int32_t s4 = 0;
    __builtin_memcpy(&s4, srow + 4 * g, rem == 0 ? 4 : size_t(rem / 32));
    return mx_scales(s4);
  }
}

// The 64 bytes from p + b, dword j = bytes 4j+b .. 4j+b+3 of the group:
// codes 8j+2b and 8j+2b+1 in bits 0-3 and 4-7. p: the group's code bytes,
// of which `n` (<= 64) exist; kMasked: load with masks (the last group of a
// row), else plainly.
template <bool kMasked>
inline __m512i codes_from(const uint8_t* p, int64_t n, int b) {
  if constexpr (kMasked)
    return _mm512_maskz_loadu_epi8(n - b >= 64 ? ~__mmask64(0) : (__mmask64(1) << (n - b)) - 1, p + b);
  else
    return _mm512_loadu_si512(p + b);
}

// One group (128 columns) of R rows against T tokens: p[r] the rows' code
// bytes (n of them, see codes_from), s[r] the lane scales, x[t] the tokens'
// f32_fp4 activations of this group. Weight vector k = 2b + h is vpermps of
// codes_from(b) >> 4h. The same operations per (row, token) for every R and
// T (see "Batch invariance" above): the 8 products summed into tmp[r][t] in
// order k = 0..7, then scaled into acc[r][t].
template <int R, int T, bool kMasked>
inline void group_step(const uint8_t* const* p, int64_t n, const __m512* s, const float* const* x,
                       __m512 (*acc)[T]) {
  const __m512 table = e2m1_table();
  __m512 tmp[R][T];
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    for (int r = 0; r < R; ++r) {
      // One row of up to 4 tokens: the shifted copies by vpsrld from the
      // one load (see "Decoding" above); more rows, or the many-token
      // path's 8 tokens (whose FMAs want every vector port): from the load
      // ports.
      const __m512i v = R == 1 && T <= 4 && b > 0 ? _mm512_srli_epi32(codes_from<kMasked>(p[r], n, 0), 8 * b)
                                                  : codes_from<kMasked>(p[r], n, b);
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * b + h;
        const __m512 w = _mm512_permutexvar_ps(h == 0 ? v : _mm512_srli_epi32(v, 4), table);
        for (int t = 0; t < T; ++t) {
          const __m512 xk = _mm512_load_ps(x[t] + 16 * k);
          tmp[r][t] = k == 0 ? _mm512_mul_ps(w, xk) : _mm512_fmadd_ps(w, xk, tmp[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(tmp[r][t], s[r], acc[r][t]);
}

// One group of R rows (1 or 2) against T tokens, each activation vector
// loaded once for all of them: p the first row's code bytes (n of them, see
// codes_from; row r's at p + r * wbytes), s[r] the rows' lane scales, x[t]
// token t's activations of this group, st + r * T * 16 row r's T
// accumulators (16 floats each, in memory: at R = 2 the 2T temporaries fill
// the registers). Per (row, token) pair group_step's operations in its
// order.
template <int R, int T, bool kMasked>
inline void group_step_mem(const uint8_t* p, int64_t wbytes, int64_t n, const __m512* s, const float* const* x,
                           float* st) {
  const __m512 table = e2m1_table();
  __m512 tmp[R][T];
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    __m512i v[R];
    for (int r = 0; r < R; ++r) v[r] = codes_from<kMasked>(p + r * wbytes, n, b);
    for (int h = 0; h < 2; ++h) {
      const int k = 2 * b + h;
      __m512 w[R];
      for (int r = 0; r < R; ++r) w[r] = _mm512_permutexvar_ps(h == 0 ? v[r] : _mm512_srli_epi32(v[r], 4), table);
      for (int t = 0; t < T; ++t) {
        __m512 xk = _mm512_load_ps(x[t] + 16 * k);
        // In a register: else GCC folds the load into every row's FMA (two
        // loads at R = 2: 0.60 instead of 0.70 of the FMA peak in the
        // kernel alone).
        asm("" : "+v"(xk));
        for (int r = 0; r < R; ++r)
          tmp[r][t] = k == 0 ? _mm512_mul_ps(w[r], xk) : _mm512_fmadd_ps(w[r], xk, tmp[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      float* a = st + (r * T + t) * 16;
      _mm512_store_ps(a, _mm512_fmadd_ps(tmp[r][t], s[r], _mm512_load_ps(a)));
    }
}

// dots[r * T + t] = sum over cols of (E2M1 x block scale) * x_t for R
// consecutive rows starting at codes w0 / scales s0 (NVFP4: scale x 2^-8,
// global scale not applied).
template <int R, int T, bool kNv>
void fp4_rows(const uint8_t* w0, const uint8_t* s0, int64_t cols, const float* const* acts, float* dots) {
  const int64_t wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  const int64_t full = cols / kCols, rem = cols % kCols;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const float* x[T];
  const uint8_t* p[R];
  // Full groups; the row's last 64 bytes with masks when they end it (their
  // shifted copies would reach past it). The masked group runs outside the
  // loop: with the branch between the two inside it, GCC kept the
  // accumulators in memory across iterations (as it did in bf16_rows,
  // linear_avx512.cpp).
  const int64_t plain = rem > 0 ? full : full - 1;
  auto group = [&](int64_t g, auto masked) __attribute__((always_inline)) {
    __m512 s[R];
    for (int r = 0; r < R; ++r) {
      p[r] = w0 + r * wbytes + 64 * g;
      // kFp4Prefetch ahead in this row; near its end, into the same row of the
      // next block of R (rows are contiguous, and memory is consumed in
      // that order).
      if (kFp4Prefetch) {
        const uint8_t* ahead = p[r] + kFp4Prefetch + (64 * g + kFp4Prefetch < wbytes ? 0 : (R - 1) * wbytes);
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
        if (T == 1 || wbytes < kLongRowBytes)
          _mm_prefetch(reinterpret_cast<const char*>(p[r] + kFp4PrefetchL2), _MM_HINT_T1);
      }
      s[r] = group_scales<kNv>(s0 + r * sbytes, g, 0);
    }
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * g;
    group_step<R, T, decltype(masked)::value>(p, 64, s, x, acc);
  };
  for (int64_t g = 0; g < plain; ++g) group(g, Masked<false>{});
  if (plain < full) group(plain, Masked<true>{});
  if (rem > 0) {
    // A multiple of 32 (MXFP4) or 16 (NVFP4) columns: rem / 2 bytes, read
    // with masks (missing codes are 0 and meet zero activations).
    __m512 s[R];
    for (int r = 0; r < R; ++r) {
      p[r] = w0 + r * wbytes + 64 * full;
      s[r] = group_scales<kNv>(s0 + r * sbytes, full, rem);
    }
    for (int t = 0; t < T; ++t) x[t] = acts[t] + kCols * full;
    group_step<R, T, true>(p, rem / 2, s, x, acc);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) dots[r * T + t] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int R, int T, bool kNv>
void fp4_range_rows(const RawWeights& w, int64_t r0, int64_t r1, const float* const* x, int64_t t0,
                    const RowsOut& out) {
  const int64_t cols = w.cols, wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  // NVFP4: the 2^-8 of nv_scales and the global scale.
  const float scale = kNv ? 256.0f * w.global_scale : 1.0f;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    float dots[R * T];
    fp4_rows<R, T, kNv>(w.data + r * wbytes, w.scales + r * sbytes, cols, x, dots);
    for (int i = 0; i < R; ++i) store_row<T>(out, r + i, t0, dots + i * T, scale);
  }
  for (; r < r1; ++r) {
    float dots[T];
    fp4_rows<1, T, kNv>(w.data + r * wbytes, w.scales + r * sbytes, cols, x, dots);
    store_row<T>(out, r, t0, dots, scale);
  }
}

template <int T, bool kNv>
void fp4_range(const RawWeights& w, int64_t r0, int64_t r1, const float* const* x, int64_t t0,
               const RowsOut& out) {
  if constexpr (T == 1) {
    if (w.cols / 2 >= kLongRowBytes) return fp4_range_rows<kLongRows, T, kNv>(w, r0, r1, x, t0, out);
  }
  fp4_range_rows<kRows<T>, T, kNv>(w, r0, r1, x, t0, out);
}

// Many tokens: kManyTokens per pass, two rows at a time
// (group_step_mem), so each decoded weight vector feeds 8 FMAs and each
// activation vector loaded feeds 2 (at 4 rows x 4 tokens a decode feeds
// only 4). Per 128 weights of a row: 4 loads, 4 shifts, 8 vpermps, 72 FMAs
// (64 products, 8 scale steps), and 32 activation loads. One row at a time
// (as before 2026-12-08, and still for a block's odd last row) loads an
// activation for every product FMA, about one load per FMA: on a Zen 5
// core (two 512-bit FMA pipes, two 512-bit loads per cycle) that held the
// pass at 0.59 of the FMA peak, against 0.73 two rows at a time (bench
// --resident 512 x 4096, MXFP4 8 tokens: 155-159 -> 190-196 GFLOP/s of a
// 263 peak; NVFP4 alike), and Sapphire Rapids' FMAs slow down when they
// take a load (bench/load_fma_rates.cpp). The 16 temporaries take the
// registers the accumulators would need, so those go through memory once
// per group (a load and a store per 8 FMAs; group_step_mem).
// One row's 8 tokens read 4 KB of activations per group, so rows go in
// blocks of kManyRows over chunks of kManyGroups groups (16 KB of
// activations, in L1 while the block's rows pass over them); between
// chunks a row's accumulators wait in memory, which changes no result. Per
// (row, token) pair this is group_step's arithmetic in group_step's order
// (the batch invariance above): the same results as passes of 1..4 tokens.
constexpr int kManyTokens = kFp4ManyTokensAvx512;
constexpr int64_t kManyRows = 16;
constexpr int64_t kManyGroups = 4;

template <bool kNv>
void fp4_range_many(const RawWeights& w, int64_t r0, int64_t r1, const float* const* x, int64_t t0,
                    const RowsOut& out) {
  constexpr int T = kManyTokens;
  const int64_t cols = w.cols, wbytes = cols / 2, sbytes = cols / (kNv ? 16 : 32);
  const int64_t full = cols / kCols, rem = cols % kCols;
  const int64_t groups = full + (rem > 0 ? 1 : 0);
  const int64_t plain = rem > 0 ? full : full - 1;  // as in fp4_rows
  const float scale = kNv ? 256.0f * w.global_scale : 1.0f;
  alignas(64) float state[kManyRows * T * 16];
  for (int64_t rb = r0; rb < r1; rb += kManyRows) {
    const int64_t nr = r1 - rb < kManyRows ? r1 - rb : kManyRows;
    for (int64_t i = 0; i < nr * T * 16; i += 16) _mm512_store_ps(state + i, _mm512_setzero_ps());
    for (int64_t g0 = 0; g0 < groups; g0 += kManyGroups) {
      const int64_t g1 = g0 + kManyGroups < groups ? g0 + kManyGroups : groups;
      const int64_t g_plain = g1 < plain ? g1 : plain;
      // Rows i .. i + R - 1 of the block over this chunk: R = 2, or 1 for a
      // block's odd last row.
      auto rows = [&](int64_t i, auto count) __attribute__((always_inline)) {
        constexpr int R = decltype(count)::value;
        const uint8_t* wrow = w.data + (rb + i) * wbytes;
        const uint8_t* srow = w.scales + (rb + i) * sbytes;
        float* st = state + i * T * 16;
        // Each row's next chunk, all its lines, a block's worth of work
        // ahead of its use (a block's rows are kManyRows separate streams);
        // after a row's last chunk, the first chunk of the same row of the
        // next block (else each block would start on kManyRows demand
        // misses). A prefetch past the data is harmless.
        for (int r = 0; r < R; ++r) {
          const uint8_t* ahead = g1 < groups ? wrow + r * wbytes + 64 * g1 : w.data + (rb + nr + i + r) * wbytes;
          for (int64_t b = 0; b < 64 * kManyGroups; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
        }
        const float* xg[T];
        auto group = [&](int64_t g, int64_t n, int64_t srem, auto masked) __attribute__((always_inline)) {
          __m512 s[R];
          for (int r = 0; r < R; ++r) s[r] = group_scales<kNv>(srow + r * sbytes, g, srem);
          for (int t = 0; t < T; ++t) xg[t] = x[t] + kCols * g;
          group_step_mem<R, T, decltype(masked)::value>(wrow + 64 * g, wbytes, n, s, xg, st);
        };
        for (int64_t g = g0; g < g_plain; ++g) group(g, 64, 0, Masked<false>{});
        if (plain < full && plain >= g0 && plain < g1) group(plain, 64, 0, Masked<true>{});
        if (rem > 0 && full >= g0 && full < g1) group(full, rem / 2, rem, Masked<true>{});
      };
      int64_t i = 0;
      for (; i + 2 <= nr; i += 2) rows(i, Count<2>{});
      if (i < nr) rows(i, Count<1>{});
    }
    for (int64_t i = 0; i < nr; ++i) {
      float dots[T];
      for (int t = 0; t < T; ++t) dots[t] = _mm512_reduce_add_ps(_mm512_load_ps(state + (i * T + t) * 16));
      store_row<T>(out, rb + i, t0, dots, scale);
    }
  }
}

template <int T>
void fp4_range_at(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int64_t t0,
                  const RowsOut& out) {
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const float*>(acts[t]);
  if constexpr (T == kManyTokens) {
    if (w.kind == WeightKind::nvfp4) fp4_range_many<true>(w, r0, r1, x, t0, out);
    else fp4_range_many<false>(w, r0, r1, x, t0, out);
  } else {
    if (w.kind == WeightKind::nvfp4) fp4_range<T, true>(w, r0, r1, x, t0, out);
    else fp4_range<T, false>(w, r0, r1, x, t0, out);
  }
}

}  // namespace

void fp4_f32_prepare_avx512(const float* x, int64_t cols, float* out) {
  const int64_t groups = round_up(cols, kCols) / kCols;
  const __m512i lane8 = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t base = g * kCols;
    const __m512i left = _mm512_set1_epi32(int32_t(cols - base < kCols ? cols - base : kCols));
    for (int k = 0; k < 8; ++k) {
      // vector k, lane j = x[base + 8j + k], 0 past cols.
      const __m512i idx = _mm512_add_epi32(lane8, _mm512_set1_epi32(k));
      const __mmask16 m = _mm512_cmplt_epi32_mask(idx, left);
      _mm512_store_ps(out + base + 16 * k, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, x + base, 4));
    }
  }
}

void fp4_f32_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                         int64_t t0, const RowsOut& out) {
  switch (n_tok) {
    case kManyTokens: fp4_range_at<kManyTokens>(w, r0, r1, acts, t0, out); break;
    case 1: fp4_range_at<1>(w, r0, r1, acts, t0, out); break;
    case 2: fp4_range_at<2>(w, r0, r1, acts, t0, out); break;
    case 3: fp4_range_at<3>(w, r0, r1, acts, t0, out); break;
    default: fp4_range_at<4>(w, r0, r1, acts, t0, out); break;
  }
}

}  // namespace nibble::x86
