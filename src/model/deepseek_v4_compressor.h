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
// The state keeps only what the next windows need: the rows of the open
// window and, for CSA, the Ca half of the last closed one. Feeding tokens in
// any split (a whole prompt, or one at a time) emits identical entries.
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
  std::vector<float> open_kv;     // [m, coff*c] wkv rows of the open window
  std::vector<float> open_score;  // [m, coff*c] wgate + ape rows of the open window
  int64_t open_rows = 0;          // rows filled (= position % m)
  std::vector<float> prev_kv;     // CSA: [m, c] Ca half of the last closed window
  std::vector<float> prev_score;  // CSA: [m, c] its gate scores
  bool has_prev = false;
  std::vector<float> entries;     // [n_entries, c] emitted entries, in window order
  int64_t n_entries = 0;
};

// Feeds h [n, D] (the attention input of tokens p0 .. p0+n-1; p0 must equal
// the number of tokens fed before) and appends an entry for every window
// that closes. rope: the "compress" table.
void compressor_forward(const CompressorWeights& w, const RopeTable& rope, double rms_eps, const float* h, int64_t n,
                        int64_t p0, CompressorState& st, ThreadPool* pool);

}  // namespace nibble
