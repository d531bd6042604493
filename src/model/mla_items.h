// Work items of the SIMD latent-attention kernels (kernels/cpu/mla_*.cpp,
// kernels_x86.h: MlaItem), shared by DeepSeek-V3's absorbed MLA and
// DeepSeek-V4's attention over its one shared KV head: one item per (token,
// slice of heads), each thread with its own scratch.
//
// An item reads its rows twice whatever its head count, so slices are as
// wide as still gives every thread an item (a decode step of one token on 2
// threads: two halves of the heads), in whole groups of kMlaGroup. The
// slicing may follow the thread count because no output depends on it:
// each head's arithmetic is the same whichever item and group it falls in
// (kernels_x86.h), so every output is the same whatever the batch and the
// split. Thread i takes items i, i + n, i + 2n, ...: in a prefill chunk
// later tokens see more rows, so contiguous ranges would leave the first
// thread with the cheap early tokens (3:1 for a chunk from position 0);
// dealt round-robin, every thread gets the same mix.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cpu/kernels_x86.h"

namespace nibble {

class ThreadPool;

// Runs item_fn over tokens x slices of `heads` heads. proto: the fields all
// items share (shapes, scale, q_stride, caches; its scratch fields and
// ld / ldr are set here); setup(it, t, h0, worker) points `it` at token t's
// heads h0 .. h0 + it.heads (q, o, rows; kv_b and row_ptrs where they vary),
// on thread `worker` (0 .. pool size - 1; one worker's items run in turn).
// max_rows: the most rows any item sees (sizes the scratch).
void run_mla_items(void (*item_fn)(const x86::MlaItem&), const x86::MlaItem& proto, int64_t tokens, int64_t heads,
                   int64_t max_rows, ThreadPool* pool,
                   const std::function<void(x86::MlaItem& it, int64_t t, int64_t h0, int worker)>& setup);

}  // namespace nibble
