// The KV compressor of CSA and HCA layers (dsv4.md §2.4) and of the
// Lightning Indexer. Every `ratio` source tokens form a window; when a window
// closes it emits one compressed entry of width c:
//   HCA (ratio 128, no overlap): entry = sum_j softmax_j(wgate x_j + ape_j) * wkv x_j
//     (softmax over the window's positions, independently per channel);
//   CSA (ratio 4, overlap): wkv/wgate emit two series Ca = [:c], Cb = [c:];
//     entry w pools Ca of window w-1 and Cb of window w (8 slots, stride 4).
// Then entry = RMSNorm(entry) and RoPE ("compress" flavour) at position w*ratio.
// Query t may use entry w iff w < (t + 1) / ratio, i.e. once its window closed.
//
// State, and why it can roll back: the state keeps the per-token rows
// (wkv x_j, wgate x_j + ape_j) of the recent tokens, not a pre-pooled open
// window, and the entries are append-only with a count. Truncating to an
// earlier position p drops the rows at and after p and the entries of windows
// that close after p; the open window at p is then exactly rows
// [floor(p/m)*m, p), as if the later tokens had never been fed. Rows are kept
// back to the window (CSA: the window before it) that a truncation by up to
// `rollback` tokens can reopen; older rows are dropped a whole window at a
// time, so decode does not move memory every token. Feeding tokens in any
// split (a whole prompt, or one at a time) emits identical entries.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v4_rope.h"
#include "model/ops.h"

namespace nibble {

struct CompressorWeights {
  int64_t ratio = 0;            // m: source tokens per entry
  int64_t dim = 0;              // c: entry width
  bool overlap = false;         // CSA: two series, coff = 2
  BoundLinear wkv, wgate;       // [coff*c, D]
  std::vector<float> ape;       // [m, coff*c] absolute position bias of the gate
  std::vector<float> norm;      // [c]
  int64_t width() const { return overlap ? 2 * dim : dim; }  // coff * c
};

struct CompressorState {
  int64_t position = 0;           // tokens fed
  int64_t rows_from = 0;          // position of the first kept row (a multiple of ratio)
  std::vector<float> kv_rows;     // [position - rows_from, coff*c] wkv x of each kept token
  std::vector<float> score_rows;  // [position - rows_from, coff*c] wgate x + ape of its slot
  std::vector<float> entries;     // [n_entries, c] emitted entries, in window order
  int64_t n_entries = 0;          // = position / ratio

  // The earliest position truncate() can return to with the rows kept.
  int64_t truncate_floor(const CompressorWeights& w) const;
  // Back to `p` (truncate_floor() <= p <= position), exactly as if the
  // tokens from p on had never been fed.
  void truncate(const CompressorWeights& w, int64_t p);
  uint64_t bytes() const;
};

// Appends one sequence's rows kv = wkv h, score = wgate h [n, coff*c] (score
// without ape; the forward runs the two linears once over a step's tokens)
// of tokens p0 .. p0+n-1 (p0 must equal st.position) and emits an entry for
// every window that closes. rope: the "compress" table. `rollback`: how many
// tokens back truncate() must still reach without refeeding.
void compressor_append(const CompressorWeights& w, const RopeTable& rope, double rms_eps, const float* kv,
                       const float* score, int64_t n, int64_t p0, int64_t rollback, CompressorState& st);

}  // namespace nibble
