// Read-only stand-ins for the linear and MoE kernels, for
// `nibble bench --backend read`: the same threading, work split, activation
// preparation and routing as the real kernels (linear_with_kernels,
// moe_with_kernels), but each row range only reads its weight bytes (codes
// and scales), a row at a time, and computes nothing. Their ratio to the
// probe is what plain reading gets through the op's structure: a kernel far
// below it is limited by its own work. (A reference, not a bound: kernels
// that stream several rows at once can read faster.)
//
// Not a model kernel: never in the registry, never planned. Their output is a
// checksum of each row's bytes (see read_rows), so that tests can tell every
// byte was read.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernels_x86.h"
#include "kernels/linear.h"
#include "kernels/moe.h"
#include "util/thread_pool.h"

namespace nibble {

// The stand-ins, on the widest SIMD ISA of this CPU (for the activation
// preparation they keep). Throw nibble::Error when the CPU has no AVX2.
void linear_read_only(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void moe_read_only(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                   ThreadPool* pool);

namespace cpu {

// The checksum of row r: s = the sum (mod 2^64) of its code bytes and then
// its scale bytes (for FP8 block-128, the scales of its 128-row tile row),
// each read as 64-bit little-endian words with a short tail zero-padded,
// folded to 24 bits, (s ^ s >> 24 ^ s >> 48) mod 2^24, so that it is an
// exact float.
uint32_t row_checksum(const x86::RawWeights& w, int64_t r);

// linear_rows with the kernels' RowsOut semantics, the checksum standing in
// for the dot product: y = (accumulate ? y : 0) + alpha * row_checksum.
void read_rows(const x86::RawWeights& w, int64_t r0, int64_t r1, const x86::PreparedActs& a,
               const x86::RowsOut& out);

}  // namespace cpu
}  // namespace nibble
