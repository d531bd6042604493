// Entry points of the x86 SIMD kernels (linear_avx2.cpp, linear_avx512.cpp).
//
// The ISA files are compiled with -mavx2 / -mavx512*; any inline function or
// template they instantiate could be emitted with those instructions and be
// picked by the linker for a baseline caller (SIGILL on an older CPU). So
// this header is plain data and plain function declarations only, the ISA
// files include nothing but it, <immintrin.h>, <cstdint> and their ISA's
// private helper header (simd_avx2.h / simd_avx512.h, included by files of
// that ISA only), and everything that allocates, throws or threads lives in
// the baseline callers (linear_cpu.cpp, moe_cpu.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nibble::x86 {

// The weight encodings the kernels know (Format + FP8 scale type, flattened).
enum class WeightKind : int32_t { mxfp4, nvfp4, fp8_ue8m0, fp8_f32, bf16, f32, int4 };

// A weight matrix W[rows, cols] as the kernels see it: WeightView's layout
// (kernels/weights.h) without its std::string.
struct RawWeights {
  WeightKind kind;
  int64_t rows;
  int64_t cols;
  const uint8_t* data;    // row-major codes, rows contiguous
  const uint8_t* scales;  // per format, see weights.h
  float global_scale;     // nvfp4 s_g; 1 otherwise
  int64_t group;          // int4: elements per BF16 scale (a multiple of 32); 0 otherwise
};

// How activations are laid out for a weight kind (chosen per ISA and backend
// by the baseline code; the layouts themselves are private to each ISA):
//   f32_fp4       FP4 weights, exact (the default): f32, permuted within
//                 groups of columns to match the lanes the packed nibbles
//                 decode to (fp4_f32_avx2.cpp / fp4_f32_avx512.cpp)
//   int8_blocks   FP4 weights, lossy (opt-in `*_int8` backends): int8 blocks
//                 of 32 with their scales, even/odd elements apart to match
//                 the packed nibbles (x is rounded to int8, step amax/127 per
//                 block)
//   f32_even_odd  BF16 weights: f32, even/odd halves of each chunk
//   f32_plain     FP8 and F32 weights: f32
//   f32_int4      INT4 weights, exact (the default): f32, permuted like
//                 f32_fp4 but owned by int4_f32_avx2.cpp / int4_f32_avx512.cpp
//   int8_int4     INT4 weights, lossy (opt-in `*_int8` backends): x rounded
//                 to int8 per block of 32 as int8_blocks, laid out for the
//                 codes' byte order (int4_int8_avx2.cpp / int4_int8_avx512.cpp)
//   int16_fp4     FP4 weights, lossy but 258x finer than int8 (opt-in
//                 `cpu_avx2_int16` backends, AVX2 only): x rounded to int16
//                 per block of 32 (step amax/32767), laid out for the
//                 codes' words (fp4_int16_avx2.cpp)
//   bf16x3        MXFP4, NVFP4, BF16 and FP8 (UE8M0) weights on AMX tiles (opt-in
//                 `cpu_avx512_amx` backends, from kAmxMinTokens tokens per
//                 call): x split into BF16 hi, mid, lo planes with
//                 hi + mid + lo == x exactly (linear_amx.cpp)
// Every layout but int8_blocks, int8_int4 and int16_fp4 keeps x exactly.
enum class ActsClass : int32_t {
  int8_blocks, f32_even_odd, f32_plain, f32_fp4, f32_int4, int8_int4, bf16x3, int16_fp4
};
constexpr int kActsClasses = 8;

// Activations prepared by prepare_acts_*, `stride` bytes per token.
struct PreparedActs {
  const uint8_t* data;
  int64_t stride;
  int64_t n;                   // tokens
  const int32_t* token_index;  // token t's row is token_index[t]; null: row t
  ActsClass cls;               // the layout of data
  // Nonzero: this preparation's number, never reused in the process
  // (cpu::new_acts_epoch), so a kernel may keep what it derived from these
  // rows (the AMX kernels' compacted tiles) across the row ranges of a call.
  uint64_t epoch;
};

// rows[i] = the prepared row of token t0 + i, i in [0, n): what the kernels
// taking an array of token rows (rows_tokens, fp4_f32_rows_*) read. Defined
// in linear_cpu.cpp, a baseline file (see the top of this header: an inline
// definition here could reach a baseline or AVX2 caller as AVX-512 code).
void token_rows(const PreparedActs& a, int64_t t0, int64_t n, const uint8_t** rows);

// Where a row range's results go: for token t and row r, with
// i = y_index ? y_index[t] : t,
//   y[i * ldy + r] = (accumulate ? y[i * ldy + r] : 0) + alpha[t] * dot(W[r], x[t])
// and alpha == nullptr meaning 1. Tokens are processed in order, so repeated
// y_index entries accumulate deterministically.
struct RowsOut {
  float* y;
  int64_t ldy;
  const float* alpha;
  bool accumulate;
  const int32_t* y_index;
};

// ---- AVX-512 (F, BW, VL, DQ, VBMI, VNNI) -------------------------------------
// Bytes per token prepare_acts_avx512 writes for `cols` input features.
int64_t acts_stride_avx512(ActsClass c, int64_t cols);
// x: [n, cols] f32 -> out: [n, stride] (64-byte aligned). For int8_blocks,
// cols must be a multiple of 16.
void prepare_acts_avx512(ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out);
// Rows [r0, r1) of W against all a.n tokens. Weight tiles are reused across
// tokens in groups of 8 (exact FP4, FP8) or 4 (the rest), so prefill reads
// each weight from DRAM once per row tile.
// FP4 weights run the path a.cls names (f32_fp4 or int8_blocks).
void linear_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a,
                        const RowsOut& out);
// The exact FP4 path (fp4_f32_avx512.cpp), called by the two above: one
// token's f32_fp4 layout (stride acts_stride_avx512(f32_fp4, cols)), and FP4
// rows [r0, r1) x tokens [t0, t0 + n_tok) (1 <= n_tok <= 4, or
// kFp4ManyTokensAvx512) for the token rows acts[0 .. n_tok).
// linear_rows_avx512 runs passes of kFp4ManyTokensAvx512 while that many
// tokens are left (measured where it is used).
constexpr int kFp4ManyTokensAvx512 = 8;
void fp4_f32_prepare_avx512(const float* x, int64_t cols, float* out);
void fp4_f32_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts,
                         int n_tok, int64_t t0, const RowsOut& out);
// INT4 (int4_f32_avx512.cpp), exact: one token's f32_int4 layout (stride
// acts_stride_avx512(f32_int4, cols)), and rows [r0, r1) x tokens [t0, t0 +
// n_tok) (1 <= n_tok <= 4), as the FP4 pair above.
void int4_f32_prepare_avx512(const float* x, int64_t cols, float* out);
void int4_f32_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts,
                          int n_tok, int64_t t0, const RowsOut& out);
// INT4 against int8 activations (int4_int8_avx512.cpp): the int8_int4
// stride and preparation of one token, and the row kernel, as above.
int64_t int4_int8_stride_avx512(int64_t cols);
void int4_int8_prepare_avx512(const float* x, int64_t cols, uint8_t* out);
void int4_int8_rows_avx512(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts,
                           int n_tok, int64_t t0, const RowsOut& out);
// h[i] = silu(min(g[i], limit)) * clamp(u[i], -limit, limit) (no clamp when
// limit <= 0), in place over g; n elements.
void swiglu_avx512(float* g, const float* u, int64_t n, float limit);

// ---- AMX-BF16 (linear_amx.cpp: the AVX-512 flags plus AMX-TILE, AMX-BF16) ---
// The caller must hold the process's permission for tile data (Linux
// arch_prctl ARCH_REQ_XCOMP_PERM; linear_cpu.cpp asks once).
// Tokens per call from which the cpu_avx512_amx backends take the tile path
// (below it, the AVX-512 FMA kernels): measured in bench/RESULTS.md.
constexpr int64_t kAmxMinTokens = 16;
// Bytes per token of the bf16x3 layout, and its preparation (64-byte
// aligned out; every plane zero-padded to a multiple of 32 columns).
int64_t amx_acts_stride(int64_t cols);
void amx_prepare_acts(const float* x, int64_t n, int64_t cols, uint8_t* out);
// Scratch amx_rows needs, 64-byte aligned: decoded weight tiles of a
// 32-row pass, and 16 gathered token rows.
int64_t amx_weight_scratch_bytes(int64_t cols);
int64_t amx_token_scratch_bytes(int64_t cols);
// Rows [r0, r1) of W (MXFP4, NVFP4, BF16 or FP8 with UE8M0 scales) against
// all a.n tokens of a bf16x3 layout. `tokens_ready`: token_scratch already
// holds these tokens' compacted tiles (the caller saw this call's tokens,
// all in one chunk, last time; amx_tokens_fit_one_chunk).
void amx_rows(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a, const RowsOut& out,
              uint8_t* weight_scratch, uint8_t* token_scratch, bool tokens_ready);
bool amx_tokens_fit_one_chunk(int64_t n, int64_t cols);

// ---- AVX2 (+FMA, F16C) ---------------------------------------------------------
// fp4_f32_rows_avx2 takes 1 <= n_tok <= kFp4MaxTokensAvx2 tokens (more than
// 8: each weight decoded once for all of them, fp4_f32_avx2.cpp).
constexpr int kFp4MaxTokensAvx2 = 64;
int64_t acts_stride_avx2(ActsClass c, int64_t cols);
void prepare_acts_avx2(ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out);
void linear_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const PreparedActs& a,
                      const RowsOut& out);
void fp4_f32_prepare_avx2(const float* x, int64_t cols, float* out);
void fp4_f32_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts,
                       int n_tok, int64_t t0, const RowsOut& out);
void int4_f32_prepare_avx2(const float* x, int64_t cols, float* out);
void int4_f32_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                        int64_t t0, const RowsOut& out);
// FP4 against int16 activations (fp4_int16_avx2.cpp): the int16_fp4 stride
// and preparation of one token, and rows [r0, r1) x tokens [t0, t0 +
// n_tok) for the token rows acts[0 .. n_tok) (any n_tok >= 1).
int64_t fp4_int16_stride_avx2(int64_t cols);
void fp4_int16_prepare_avx2(const float* x, int64_t cols, uint8_t* out);
void fp4_int16_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                         int64_t t0, const RowsOut& out);
int64_t int4_int8_stride_avx2(int64_t cols);
void int4_int8_prepare_avx2(const float* x, int64_t cols, uint8_t* out);
void int4_int8_rows_avx2(const RawWeights& w, int64_t r0, int64_t r1, const uint8_t* const* acts, int n_tok,
                         int64_t t0, const RowsOut& out);
void swiglu_avx2(float* g, const float* u, int64_t n, float limit);

// ---- MLA attention (mla_avx2.cpp, mla_avx512.cpp) ---------------------------
// One work item of the absorbed latent attention (model/deepseek_v3_attention.h):
// one token's query against cache rows [0, rows) for `heads` heads, taken in
// groups of kMlaGroup that share every cache row they load (register tiles),
// and blocks of cache rows that stay in L2 while all the item's groups pass
// over them, so an item reads the cache from memory twice (scores, ctx)
// whatever its head count. Every head's sums run in the same order whatever
// the other heads of its item and group (each head has its own lanes and
// accumulators, reduced by a fixed tree), so a head's output does not depend
// on how heads are grouped into items, on the batch or on the threads.
//
// DeepSeek-V4's attention is the same computation over its one shared KV
// head (keys = values = rows of d floats, no absorption): kv_b null means q
// is already in the rows' space (C floats per head), there is no RoPE half
// (rope = 0), o[h] = ctx_h / sum_h (v = C), and the rows are gathered ones
// (window ring, compressed entries) given by pointer. gpt-oss's grouped-query
// attention is that with other rows for the values (value_ptrs), one item
// per (token, KV head) over the query heads that share it.
constexpr int64_t kMlaGroup = 8;
struct MlaItem {
  int64_t latent, rope, nope, v;  // C, r, n, v
  int64_t heads;                  // heads of this item (>= 1); groups = ceil(heads / kMlaGroup)
  float scale;                    // softmax scale
  const float* q;                 // head i's [nope | rope] at q + i * q_stride (RoPE'd)
  int64_t q_stride;               // n + r
  const float* kv_b;              // head i's W_UK [n, C] at kv_b + i (n + v) C, its W_UV [v, C] after it;
                                  // null: no absorption (q_stride >= C, v == C, rope == 0)
  const float* latent_cache;      // [rows, C]
  const float* k_rope_cache;      // [rows, r]
  const float* const* row_ptrs;   // unless null: row j is row_ptrs[j] (C floats; rope == 0), not latent_cache + j C
  const float* const* value_ptrs; // unless null: ctx sums value_ptrs[j] (C floats), not row j (K != V)
  const float* sinks;             // unless null: head i's sink logit, one more softmax term that adds only to the sum
  int64_t rows;                   // cache rows the token sees (its position + 1)
  float* o;                       // [heads, v]
  // Scratch, 64-byte aligned, written before it is read (8g = groups * kMlaGroup):
  float* q_abs;                   // [8g, ld]   W_UK^T q_nope per head (order within: the ISA file's)
  float* q_rope;                  // [8g, ldr]  the query's RoPE half per head (likewise)
  float* ctx;                     // [8g, ld]   sum_j p_j c_j per head
  float* scores;                  // [groups, rows rounded up to 2, kMlaGroup]
  float* inv_sum;                 // [8g]       1 / softmax denominator per head
  int64_t ld;                     // C rounded up to 32
  int64_t ldr;                    // r rounded up to 16
};
void mla_item_avx512(const MlaItem& it);
void mla_item_avx2(const MlaItem& it);

// The Lightning indexer's scores of one query (DeepSeek-V4's CSA layers,
// model/deepseek_v4_indexer.h) over entries [s0, s1) of its keys:
//   score[s] = sum_h max(q_h . key_s, 0) w_h     (w: each head's weight, scales folded in)
// in the same files, on the score tiles of the attention above (8 heads x 2
// entries; AVX2 4 x 2). Per score, in an order no other score, s0 or s1
// changes: each head's dot lane-wise over dim in chunk order and the tile's
// fixed reduction tree, then heads in tile order into one lane per head
// position (relu, times w_h, added), then a fixed tree over those lanes.
struct IndexerScores {
  int64_t heads, dim;
  const float* q;     // [heads, dim]
  const float* w;     // [heads]
  const float* keys;  // [entries, dim]
  int64_t s0, s1;
  float* score;       // score[s] for s in [s0, s1)
  float* scratch;     // 64-byte aligned: (heads rounded up to 8) x (dim rounded up to 16) floats
};
void indexer_scores_avx512(const IndexerScores& x);
void indexer_scores_avx2(const IndexerScores& x);

}  // namespace nibble::x86
