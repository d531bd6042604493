// The baseline (non-ISA) half of the CPU SIMD linear kernels: validation,
// scratch memory, threading. The arithmetic lives in linear_avx2.cpp and
// linear_avx512.cpp, reached through kernels_x86.h.
#include "kernels/cpu/linear_cpu.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "format/block.h"
#include "util/error.h"

namespace nibble {

namespace cpu {

namespace {

using x86::ActsClass;
using x86::WeightKind;

// The same classes on both ISAs (each lays them out its own way).
template <Fp4Acts kFp4>
ActsClass acts_class(WeightKind kind, int64_t /*n*/) {
  switch (kind) {
    case WeightKind::mxfp4:
    case WeightKind::nvfp4:
      if constexpr (kFp4 == Fp4Acts::int8) return ActsClass::int8_blocks;
      else if constexpr (kFp4 == Fp4Acts::int16) return ActsClass::int16_fp4;
      else return ActsClass::f32_fp4;
    case WeightKind::bf16: return ActsClass::f32_even_odd;
    case WeightKind::fp8_ue8m0:
    case WeightKind::fp8_f32:
    case WeightKind::f32: return ActsClass::f32_plain;
    case WeightKind::int4: return kFp4 == Fp4Acts::int8 ? ActsClass::int8_int4 : ActsClass::f32_int4;
  }
  return ActsClass::f32_plain;
}

// The AMX kernels: from kAmxMinTokens prepared tokens, MXFP4, NVFP4, BF16
// and FP8 (UE8M0 scales) weights take the tile path; the rest (FP8 with f32
// scales, whose products would not be BF16 numbers; F32; INT4) is the
// AVX-512 f32 kernels'.
ActsClass amx_acts_class(WeightKind kind, int64_t n) {
  const bool tiles = kind == WeightKind::mxfp4 || kind == WeightKind::nvfp4 || kind == WeightKind::bf16 ||
                     kind == WeightKind::fp8_ue8m0;
  return tiles && n >= x86::kAmxMinTokens ? ActsClass::bf16x3 : acts_class<Fp4Acts::f32>(kind, n);
}

int64_t amx_stride(ActsClass c, int64_t cols) {
  return c == ActsClass::bf16x3 ? x86::amx_acts_stride(cols) : x86::acts_stride_avx512(c, cols);
}

void amx_prepare(ActsClass c, const float* x, int64_t n, int64_t cols, uint8_t* out) {
  if (c == ActsClass::bf16x3) x86::amx_prepare_acts(x, n, cols, out);
  else x86::prepare_acts_avx512(c, x, n, cols, out);
}

// The tile path's scratch lives here (the ISA file allocates nothing), one
// pair per thread, grown to the widest matrix seen. The compacted token
// tiles are kept for the next call on the same tokens of the same
// preparation (the MoE runs an expert's gate and up projections, and every
// row range of each, on one prepared x: compacting it once per thread, not
// per row range, saves a copy as large as the activations each time).
void amx_linear_rows(const x86::RawWeights& w, int64_t r0, int64_t r1, const x86::PreparedActs& a,
                     const x86::RowsOut& out) {
  if (a.cls != ActsClass::bf16x3) {
    x86::linear_rows_avx512(w, r0, r1, a, out);
    return;
  }
  struct Held {
    uint64_t epoch = 0;
    const int32_t* token_index = nullptr;
    int64_t n = 0, cols = 0;
  };
  thread_local ScratchBuffer weights, tokens;
  thread_local Held held;
  const bool one_chunk = x86::amx_tokens_fit_one_chunk(a.n, w.cols);
  const bool ready = one_chunk && a.epoch != 0 && held.epoch == a.epoch && held.token_index == a.token_index &&
                     held.n == a.n && held.cols == w.cols;
  uint8_t* t = tokens.get(size_t(x86::amx_token_scratch_bytes(w.cols)));
  x86::amx_rows(w, r0, r1, a, out, weights.get(size_t(x86::amx_weight_scratch_bytes(w.cols))), t, ready);
  held = one_chunk ? Held{a.epoch, a.token_index, a.n, w.cols} : Held{};
}

const IsaKernels kAvx2 = {CpuIsa::avx2,           Fp4Acts::f32,          acts_class<Fp4Acts::f32>,
                          x86::acts_stride_avx2,  x86::prepare_acts_avx2, x86::linear_rows_avx2,
                          x86::swiglu_avx2};
const IsaKernels kAvx2Int8 = {CpuIsa::avx2,          Fp4Acts::int8,          acts_class<Fp4Acts::int8>,
                              x86::acts_stride_avx2, x86::prepare_acts_avx2, x86::linear_rows_avx2,
                              x86::swiglu_avx2};
// FP4 x int16 (fp4_int16_avx2.cpp); every other format as kAvx2.
const IsaKernels kAvx2Int16 = {CpuIsa::avx2,          Fp4Acts::int16,         acts_class<Fp4Acts::int16>,
                               x86::acts_stride_avx2, x86::prepare_acts_avx2, x86::linear_rows_avx2,
                               x86::swiglu_avx2};
const IsaKernels kAvx512 = {CpuIsa::avx512,          Fp4Acts::f32,             acts_class<Fp4Acts::f32>,
                            x86::acts_stride_avx512, x86::prepare_acts_avx512, x86::linear_rows_avx512,
                            x86::swiglu_avx512};
const IsaKernels kAvx512Int8 = {CpuIsa::avx512,          Fp4Acts::int8,            acts_class<Fp4Acts::int8>,
                                x86::acts_stride_avx512, x86::prepare_acts_avx512, x86::linear_rows_avx512,
                                x86::swiglu_avx512};
const IsaKernels kAvx512Amx = {CpuIsa::avx512, Fp4Acts::bf16x3, amx_acts_class,     amx_stride,
                               amx_prepare,    amx_linear_rows, x86::swiglu_avx512};

// Linux gives a process the AMX tile state only when asked
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); a tile instruction
// before that dies of SIGILL. "" when granted, else why not.
std::string request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0)
    return std::string("the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
  return "";
#else
  return "AMX tile state is only requested on Linux";
#endif
}

}  // namespace

const IsaKernels& isa_kernels(CpuIsa isa, Fp4Acts acts) {
  if (isa == CpuIsa::ref) fail("the scalar reference has no SIMD kernels");
  // The planner only binds kernels the host runs; this guards direct calls
  // (a SIGILL otherwise). The host's answer never changes, so it is asked
  // once per ISA, not on every call.
  static const std::string avx2_why = cpu_isa_unsupported(CpuIsa::avx2, host_cpu_features());
  static const std::string avx512_why = cpu_isa_unsupported(CpuIsa::avx512, host_cpu_features());
  if (const std::string& why = isa == CpuIsa::avx2 ? avx2_why : avx512_why; !why.empty())
    fail("cannot run ", cpu_isa_name(isa), " kernels on this CPU: ", why);
  const bool int8 = acts == Fp4Acts::int8;
  if (acts == Fp4Acts::bf16x3) {
    if (isa != CpuIsa::avx512) fail("the AMX kernels are AVX-512 kernels, not ", cpu_isa_name(isa));
    if (const std::string& why = amx_unsupported_here(); !why.empty())
      fail("cannot run the AMX kernels here: ", why);
    return kAvx512Amx;
  }
  if (acts == Fp4Acts::int16) {
    if (isa != CpuIsa::avx2) fail("the int16 kernels are AVX2 kernels, not ", cpu_isa_name(isa));
    return kAvx2Int16;
  }
  if (isa == CpuIsa::avx2) return int8 ? kAvx2Int8 : kAvx2;
  return int8 ? kAvx512Int8 : kAvx512;
}

}  // namespace cpu

std::string amx_unsupported(const CpuFeatures& f) {
  std::string missing = cpu_isa_unsupported(CpuIsa::avx512, f);
  if (!f.amx_tile || !f.amx_bf16) {
    const std::string amx = !f.amx_tile ? "AMX-TILE, AMX-BF16" : "AMX-BF16";
    missing = missing.empty() ? "needs " + amx : missing + ", " + amx;
  }
  return missing;
}

const std::string& amx_unsupported_here() {
  // The host's answer never changes: asked once per process (isa_kernels
  // asks on every call of the AMX backend's ops).
  static const std::string why = [] {
    std::string missing = amx_unsupported(host_cpu_features());
    return missing.empty() ? cpu::request_amx_permission() : missing;
  }();
  return why;
}

namespace cpu {

x86::RawWeights raw_weights(const WeightView& w) {
  x86::RawWeights r{};
  r.rows = w.rows;
  r.cols = w.cols;
  r.data = w.data;
  r.scales = w.scales;
  r.global_scale = w.global_scale;
  if (w.rows < 0 || w.cols <= 0) fail("tensor ", w.name, ": bad shape [", w.rows, ", ", w.cols, "]");
  if (!w.data && w.rows > 0) fail("tensor ", w.name, ": no data");
  switch (w.format) {
    case Format::mxfp4:
      if (w.cols % kMxfp4Block != 0)
        fail("tensor ", w.name, ": MXFP4 needs in-features divisible by 32, got ", w.cols);
      r.kind = x86::WeightKind::mxfp4;
      break;
    case Format::nvfp4:
      if (w.cols % kNvfp4Block != 0)
        fail("tensor ", w.name, ": NVFP4 needs in-features divisible by 16, got ", w.cols);
      r.kind = x86::WeightKind::nvfp4;
      break;
    case Format::fp8_block128:
      r.kind = w.fp8_scale == Fp8ScaleType::ue8m0 ? x86::WeightKind::fp8_ue8m0 : x86::WeightKind::fp8_f32;
      break;
    case Format::bf16: r.kind = x86::WeightKind::bf16; break;
    case Format::f32: r.kind = x86::WeightKind::f32; break;
    case Format::int4:
      // int4_f32_avx2.cpp / int4_f32_avx512.cpp step over 32-column blocks
      // with one scale each; other group sizes run on cpu_ref.
      if (w.group <= 0 || w.group % 32 != 0)
        fail("tensor ", w.name, ": the SIMD kernels need an INT4 group size that is a multiple of 32, got ", w.group,
             " (cpu_ref runs any multiple of 8)");
      if (w.cols % w.group != 0)
        fail("tensor ", w.name, ": INT4 in-features ", w.cols, " are not a multiple of the group size ", w.group);
      r.kind = x86::WeightKind::int4;
      r.group = w.group;
      break;
    case Format::int_index: fail("tensor ", w.name, ": an integer index tensor is not a weight matrix");
  }
  const bool scaled = w.format == Format::mxfp4 || w.format == Format::nvfp4 || w.format == Format::fp8_block128 ||
                      w.format == Format::int4;
  if (scaled && !w.scales && w.rows > 0) fail("tensor ", w.name, ": ", format_name(w.format), " weights without scales");
  return r;
}

uint8_t* ScratchBuffer::get(size_t bytes) {
  if (bytes > size_ || !buf_) {
    size_t size = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096);
    uint8_t* p = static_cast<uint8_t*>(std::aligned_alloc(64, size));
    if (!p) fail("out of memory: kernel scratch of ", size, " bytes");
    buf_.reset(p);
    size_ = size;
  }
  return buf_.get();
}

void parallel_items(ThreadPool* pool, int64_t n_items, FunctionRef<void(int64_t, int)> fn) {
  if (n_items <= 0) return;
  if (!pool || pool->size() <= 1 || n_items == 1) {
    for (int64_t i = 0; i < n_items; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  pool->run([&](int thread, int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) fn(i, thread);
  });
}

int64_t row_chunk(int64_t rows, int threads) {
  if (threads <= 1) return std::max<int64_t>(rows, 1);
  int64_t chunk = (rows + 4 * threads - 1) / (4 * threads);
  chunk = (chunk + 15) / 16 * 16;
  return std::max<int64_t>(chunk, 16);
}

x86::PreparedActs prepare_acts(const IsaKernels& k, x86::ActsClass c, const float* x, int64_t n,
                               int64_t cols, ScratchBuffer& buf, ThreadPool* pool) {
  const int64_t stride = k.acts_stride(c, cols);
  uint8_t* out = buf.get(size_t(std::max<int64_t>(n, 1) * stride));
  if (pool && n >= 64) {
    pool->parallel_for(n, [&](int64_t b, int64_t e, int) {
      k.prepare_acts(c, x + b * cols, e - b, cols, out + b * stride);
    });
  } else {
    k.prepare_acts(c, x, n, cols, out);
  }
  return {out, stride, n, nullptr, c, new_acts_epoch()};
}

uint64_t new_acts_epoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace cpu

void linear_with_kernels(const cpu::IsaKernels& k, const WeightView& w, const float* x, int64_t n, float* y,
                         ThreadPool* pool) {
  const x86::RawWeights raw = cpu::raw_weights(w);
  if (n < 0) fail("tensor ", w.name, ": negative token count ", n);
  if (n == 0 || w.rows == 0) return;
  if (!x || !y) fail("tensor ", w.name, ": null activations");
  // Activations are prepared once per call into this thread's scratch (the
  // workers only read them).
  thread_local cpu::ScratchBuffer acts_buf;
  const x86::PreparedActs prepared =
      cpu::prepare_acts(k, k.acts_class(raw.kind, n), x, n, w.cols, acts_buf, pool);
  const x86::RowsOut out{y, w.rows, nullptr, false, nullptr};
  const int threads = pool ? pool->size() : 1;
  const int64_t chunk = cpu::row_chunk(w.rows, threads);
  const int64_t items = (w.rows + chunk - 1) / chunk;
  cpu::parallel_items(pool, items, [&](int64_t i, int) {
    const int64_t r0 = i * chunk, r1 = std::min(w.rows, r0 + chunk);
    k.linear_rows(raw, r0, r1, prepared, out);
  });
}

void x86::token_rows(const x86::PreparedActs& a, int64_t t0, int64_t n, const uint8_t** rows) {
  for (int64_t i = 0; i < n; ++i) rows[i] = a.data + (a.token_index ? a.token_index[t0 + i] : t0 + i) * a.stride;
}

namespace {

void linear_simd(CpuIsa isa, Fp4Acts acts, const WeightView& w, const float* x, int64_t n, float* y,
                 ThreadPool* pool) {
  linear_with_kernels(cpu::isa_kernels(isa, acts), w, x, n, y, pool);
}

}  // namespace

const char* fp4_acts_name(Fp4Acts a) {
  switch (a) {
    case Fp4Acts::f32: return "f32";
    case Fp4Acts::int8: return "int8";
    case Fp4Acts::bf16x3: return "bf16x3";
    case Fp4Acts::int16: return "int16";
  }
  return "?";
}

void linear_avx2(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx2, Fp4Acts::f32, w, x, n, y, pool);
}

void linear_avx512(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx512, Fp4Acts::f32, w, x, n, y, pool);
}

void linear_avx2_int8(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx2, Fp4Acts::int8, w, x, n, y, pool);
}

void linear_avx512_int8(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx512, Fp4Acts::int8, w, x, n, y, pool);
}

void linear_avx2_int16(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx2, Fp4Acts::int16, w, x, n, y, pool);
}

void linear_avx512_amx(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  linear_simd(CpuIsa::avx512, Fp4Acts::bf16x3, w, x, n, y, pool);
}

LinearFn linear_for_isa(CpuIsa isa, Fp4Acts acts) {
  const bool int8 = acts == Fp4Acts::int8;
  if (acts == Fp4Acts::bf16x3 && isa != CpuIsa::ref) return isa == CpuIsa::avx512 ? linear_avx512_amx : nullptr;
  if (acts == Fp4Acts::int16 && isa != CpuIsa::ref) return isa == CpuIsa::avx2 ? linear_avx2_int16 : nullptr;
  switch (isa) {
    case CpuIsa::ref: return linear_ref;
    case CpuIsa::avx2: return int8 ? linear_avx2_int8 : linear_avx2;
    case CpuIsa::avx512: return int8 ? linear_avx512_int8 : linear_avx512;
  }
  return linear_ref;
}

}  // namespace nibble
