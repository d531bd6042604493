// The CPU SIMD linear kernels (AVX2, AVX-512) behind the LinearFn signature,
// and the building blocks they share with the fused MoE kernel: weight
// validation, activation preparation, per-ISA entry points, and dynamic
// chunking of rows over the thread pool.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels_x86.h"
#include "kernels/linear.h"
#include "util/thread_pool.h"

namespace nibble {

// What the FP4 (MXFP4 / NVFP4) and INT4 kernels do with activations:
//   f32   exact products, f32 accumulation (the default backends cpu_avx2,
//         cpu_avx512)
//   int8  x rounded to int8 per block of 32 (scale amax/127), then integer
//         dot products (VNNI / maddubs): faster at large batches, lossy
//         (opt-in backends cpu_avx2_int8, cpu_avx512_int8)
//   int16 AVX2 only: x rounded to int16 per block of 32 (scale
//         amax/32767, 258 times finer than int8), then vpmaddwd dot
//         products: lossy (logits within ~1e-4), faster than f32 (opt-in
//         backends cpu_avx2_int16; INT4 runs as f32 there)
//   bf16x3  AVX-512 only, on AMX tiles (opt-in backends cpu_avx512_amx):
//         from x86::kAmxMinTokens tokens per call, MXFP4, NVFP4, BF16 and
//         FP8 (UE8M0 scales) weights multiply x split exactly into three BF16 parts (products
//         exact, f32 accumulation, as exact as f32); fewer tokens, and the
//         other formats, run as f32. A token's last bits then depend on how
//         many tokens share its call: not batch invariant.
// Other FP8 and F32 weights always run against f32 activations, exactly.
enum class Fp4Acts { f32, int8, bf16x3, int16 };
const char* fp4_acts_name(Fp4Acts a);  // "f32", "int8", "bf16x3", "int16"

// Y[n, rows] = X[n, cols] · W^T. Throw nibble::Error (naming the tensor) for
// a malformed view, or when this CPU lacks the ISA.
void linear_avx2(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void linear_avx512(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
// The same with FP4 and INT4 weights against int8 activations (lossy, opt-in).
void linear_avx2_int8(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void linear_avx512_int8(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
// FP4 weights against int16 activations on AVX2 (Fp4Acts::int16; opt-in).
void linear_avx2_int16(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
// AVX-512 with AMX-BF16 tiles for batches (Fp4Acts::bf16x3; opt-in).
void linear_avx512_amx(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// "" when a CPU with `f` has what the AMX kernels need (AMX-TILE, AMX-BF16
// and the AVX-512 set), else the missing features.
std::string amx_unsupported(const CpuFeatures& f);
// The same for this process: the host's features, and Linux's grant of the
// tile state (both asked once, on the first call).
const std::string& amx_unsupported_here();

// linear_ref, linear_avx2(_int8, _int16), linear_avx512(_int8) or
// linear_avx512_amx (ref ignores acts; bf16x3 with avx2 and int16 with
// avx512: null, there are no such kernels).
LinearFn linear_for_isa(CpuIsa isa, Fp4Acts acts = Fp4Acts::f32);

namespace cpu {

// One ISA's entry points (kernels_x86.h), for one FP4 activation mode.
struct IsaKernels {
  CpuIsa isa;
  Fp4Acts fp4_acts;
  // The activation layout these kernels use for a weight kind when `n`
  // tokens are prepared; kinds with equal classes share one prepared copy of
  // x (only the bf16x3 kernels look at n).
  x86::ActsClass (*acts_class)(x86::WeightKind kind, int64_t n);
  int64_t (*acts_stride)(x86::ActsClass c, int64_t cols);
  void (*prepare_acts)(x86::ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out);
  void (*linear_rows)(const x86::RawWeights& w, int64_t r0, int64_t r1,
                      const x86::PreparedActs& a, const x86::RowsOut& out);
  void (*swiglu)(float* g, const float* u, int64_t n, float limit);
};

// Throws nibble::Error for ref (no SIMD entry points) or an ISA this CPU
// lacks (the kernels would die of SIGILL).
const IsaKernels& isa_kernels(CpuIsa isa, Fp4Acts acts = Fp4Acts::f32);

// Checks the view (formats, divisibility, pointers; errors name w.name) and
// flattens it for the kernels.
x86::RawWeights raw_weights(const WeightView& w);

// A 64-byte aligned buffer that only grows: kernels keep one per thread so
// decode does not allocate per op.
class ScratchBuffer {
 public:
  uint8_t* get(size_t bytes);

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buf_;
  size_t size_ = 0;
};

// Runs fn(item, thread) for item in [0, n_items) on all threads of the pool
// (or inline when pool is null), items claimed one by one from a shared
// counter so that a thread slowed by another process does not hold up the op.
void parallel_items(ThreadPool* pool, int64_t n_items, FunctionRef<void(int64_t, int)> fn);

// Rows per work item for a matrix of `rows` rows on `threads` threads:
// several items per thread for balance, each large enough (>= 16 rows) to
// amortise the claim.
int64_t row_chunk(int64_t rows, int threads);

// A number no other preparation of activations in this process has
// (PreparedActs::epoch).
uint64_t new_acts_epoch();

// Prepares x [n, cols] for `c` into `buf` (parallel over tokens for large n),
// with a new epoch.
x86::PreparedActs prepare_acts(const IsaKernels& k, x86::ActsClass c, const float* x, int64_t n,
                               int64_t cols, ScratchBuffer& buf, ThreadPool* pool);

}  // namespace cpu

// The linear op on the given kernels (what linear_avx2 etc. run with their
// ISA's kernels; `nibble bench --backend read` passes read-only ones).
void linear_with_kernels(const cpu::IsaKernels& k, const WeightView& w, const float* x, int64_t n, float* y,
                         ThreadPool* pool);

}  // namespace nibble
