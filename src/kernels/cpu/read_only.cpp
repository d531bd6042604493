#include "kernels/cpu/read_only.h"

#include <cstring>

#include "format/block.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/moe_cpu.h"
#include "util/error.h"

namespace nibble {

namespace cpu {

namespace {

// Bytes ahead that the reader prefetches, like the bandwidth probe.
constexpr int64_t kAhead = 1024;

// Sum of the 64-bit words of p[0, n) (tail zero-padded), a cache line per
// step with one prefetch and eight independent adds, like the bandwidth
// probe's loop (a 32-byte step with a prefetch every other step read
// 5-25% slower through the same op): far below what a core can issue, so
// the reader is bound by memory alone.
uint64_t sum_words(const uint8_t* p, int64_t n) {
  uint64_t a[8] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __builtin_prefetch(p + i + kAhead);
    for (int k = 0; k < 8; ++k) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * k, 8);
      a[k] += v;
    }
  }
  for (; i < n; i += 8) {
    uint64_t v = 0;
    std::memcpy(&v, p + i, size_t(n - i < 8 ? n - i : 8));
    a[0] += v;
  }
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

// Code bytes per row, and where row r's scales are and how many bytes.
int64_t row_bytes(const x86::RawWeights& w) {
  switch (w.kind) {
    case x86::WeightKind::mxfp4:
    case x86::WeightKind::nvfp4:
    case x86::WeightKind::int4: return w.cols / 2;
    case x86::WeightKind::fp8_ue8m0:
    case x86::WeightKind::fp8_f32: return w.cols;
    case x86::WeightKind::bf16: return 2 * w.cols;
    case x86::WeightKind::f32: return 4 * w.cols;
  }
  return 0;
}

void row_scales(const x86::RawWeights& w, int64_t r, const uint8_t** p, int64_t* n) {
  const int64_t tiles = (w.cols + kFp8Tile - 1) / kFp8Tile;
  switch (w.kind) {
    case x86::WeightKind::mxfp4: *n = w.cols / kMxfp4Block; *p = w.scales + r * *n; return;
    case x86::WeightKind::nvfp4: *n = w.cols / kNvfp4Block; *p = w.scales + r * *n; return;
    case x86::WeightKind::fp8_ue8m0: *n = tiles; *p = w.scales + (r / kFp8Tile) * tiles; return;
    case x86::WeightKind::fp8_f32: *n = 4 * tiles; *p = w.scales + (r / kFp8Tile) * 4 * tiles; return;
    case x86::WeightKind::int4: *n = 2 * (w.cols / w.group); *p = w.scales + r * *n; return;  // BF16 per group
    case x86::WeightKind::bf16:
    case x86::WeightKind::f32: *n = 0; *p = nullptr; return;
  }
}

}  // namespace

uint32_t row_checksum(const x86::RawWeights& w, int64_t r) {
  const int64_t rb = row_bytes(w);
  uint64_t sum = sum_words(w.data + r * rb, rb);
  const uint8_t* s = nullptr;
  int64_t sn = 0;
  row_scales(w, r, &s, &sn);
  if (sn > 0) sum += sum_words(s, sn);
  return uint32_t((sum ^ (sum >> 24) ^ (sum >> 48)) & 0xFFFFFF);
}

void read_rows(const x86::RawWeights& w, int64_t r0, int64_t r1, const x86::PreparedActs& a,
               const x86::RowsOut& out) {
  for (int64_t r = r0; r < r1; ++r) {
    const float c = float(row_checksum(w, r));
    for (int64_t t = 0; t < a.n; ++t) {
      const int64_t yi = out.y_index ? out.y_index[t] : t;
      float* y = out.y + yi * out.ldy + r;
      const float v = c * (out.alpha ? out.alpha[t] : 1.0f);
      *y = out.accumulate ? *y + v : v;
    }
  }
}

namespace {

// The widest ISA's kernels with read_rows in place of the arithmetic.
const IsaKernels& read_only_kernels() {
  static const IsaKernels k = [] {
    const CpuIsa isa = best_cpu_isa(host_cpu_features());
    if (isa == CpuIsa::ref) fail("the read-only kernels need AVX2 (they keep its activation preparation)");
    IsaKernels r = isa_kernels(isa);
    r.linear_rows = read_rows;
    return r;
  }();
  return k;
}

}  // namespace
}  // namespace cpu

void linear_read_only(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_with_kernels(cpu::read_only_kernels(), w, x, n, y, pool);
}

void moe_read_only(const MoeWeights& w, const float* x, const int32_t* token_ids, int64_t n, float* y,
                   ThreadPool* pool) {
  moe_with_kernels(cpu::read_only_kernels(), w, x, token_ids, n, y, pool);
}

}  // namespace nibble
