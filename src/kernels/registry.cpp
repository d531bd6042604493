// The one flat list of kernels (like ggml's backend list). A kernel is listed
// only once it exists and is tested against the scalar reference.
//
// Efficiencies: the fraction of the device's read bandwidth (and peak
// arithmetic) the kernel reaches, from `nibble bench` on a 2-core AVX-512
// machine (see bench/RESULTS.md). The scalar reference
// dequantizes every element and accumulates in f64; it streams at a few
// percent of bandwidth.
#include "kernels/registry.h"

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/moe_cpu.h"

namespace nibble {

namespace {

// INT4 (compressed-tensors, group a multiple of 32) runs on every SIMD
// kernel: exactly (int4_f32_avx2.cpp / int4_f32_avx512.cpp) in the default
// ones, against int8-rounded activations (int4_int8_*.cpp) in the _int8 ones.
const std::vector<Format> kAllWeightFormats = {Format::mxfp4, Format::nvfp4, Format::fp8_block128,
                                               Format::bf16, Format::f32, Format::int4};
const std::vector<Format> kFp4Formats = {Format::mxfp4, Format::nvfp4};
// What the _int8 kernels round activations for.
const std::vector<Format> kInt8ActsFormats = {Format::mxfp4, Format::nvfp4, Format::int4};
const std::vector<Format>& kRefFormats = kAllWeightFormats;
constexpr const char* kInt8Acts = "quantizes activations to int8";
// The _int16 kernels (AVX2): FP4 only; INT4 runs exactly there.
constexpr const char* kInt16Acts = "quantizes activations to int16, steps 258x finer than int8";

std::string needs_cpu(const Device& d) {
  return d.kind == DeviceKind::cpu ? "" : "needs a CPU device; " + d.name + " is a CUDA device";
}

// ---- kernels/cpu SIMD kernels (owner: kernels branch) ----
std::string needs_cpu_isa(const Device& d, CpuIsa isa) {
  if (std::string r = needs_cpu(d); !r.empty()) return r;
  return cpu_isa_unsupported(isa, d.cpu);
}
std::string needs_avx2(const Device& d) { return needs_cpu_isa(d, CpuIsa::avx2); }
std::string needs_avx512(const Device& d) { return needs_cpu_isa(d, CpuIsa::avx512); }
// The AMX kernels: the features, and on this machine Linux's grant of the
// tile state too.
std::string needs_amx(const Device& d) {
  if (std::string r = needs_cpu(d); !r.empty()) return r;
  if (std::string r = amx_unsupported(d.cpu); !r.empty()) return r;
  return d.hypothetical ? "" : amx_unsupported_here();
}
// What the AMX kernels do to batch invariance (linear_amx.cpp).
constexpr const char* kAmxBatchVariant =
    "from 16 tokens per call (per expert in the MoE) sums in another order, on AMX tiles, so a token's last bits "
    "depend on its batch";

// ---- kernels/cuda (docs/cuda.md) ----
std::string sm_name(const Device& d) {
  const std::string sm = "sm_" + std::to_string(d.sm);
  return d.name == sm ? sm : d.name + " (" + sm + ")";
}
std::string needs_cuda_sm80(const Device& d) {
  if (d.kind != DeviceKind::cuda) return "needs a CUDA device; " + d.name + " is a CPU";
  if (d.sm < 80) return "needs sm_80 or newer (BF16 mma.sync); " + sm_name(d) + " is older";
  return "";
}
// Where native FP4 MMA goes (sm_120a mma.sync ... block_scale, sm_100a
// tcgen05.mma ... block_scale; gpu.md §3): listed so that explain says it
// is not built yet, never chosen.
std::string native_fp4_not_built(const Device& d) {
  if (d.kind != DeviceKind::cuda) return "needs a CUDA device; " + d.name + " is a CPU";
  const int major = d.sm / 10;
  if (major != 10 && major != 12)
    return "needs native FP4 MMA (sm_100a tcgen05 / sm_120a mma.sync block_scale); " + sm_name(d) + " has none";
  return std::string("not built yet: native FP4 MMA for ") + (major == 10 ? "sm_100a (tcgen05.mma block_scale)"
                                                                          : "sm_120a (mma.sync m16n8k64 block_scale)") +
         " is a later part of issue 15";
}

}  // namespace

const char* kernel_unit_class(const KernelDesc& k) {
  if (k.unit_class) return k.unit_class;
  return std::string(k.name) == "cpu_ref" ? "scalar" : "cpu_simd";
}

const std::vector<KernelDesc>& kernel_registry() {
  static const std::vector<KernelDesc> registry = {
      {"cpu_ref", Op::linear, kRefFormats, needs_cpu, 0, 0.03, 0.01, "scalar, f64 accumulate",
       linear_ref, nullptr},
      {"cpu_ref", Op::moe, kRefFormats, needs_cpu, 0, 0.03, 0.01, "scalar, f64 accumulate",
       nullptr, moe_ref},
      // ---- kernels/cpu SIMD kernels (owner: kernels branch). The exact
      // kernels are the default for every format; the _int8 ones differ only
      // for FP4 and INT4 weights, where they round activations to int8 (faster, lossy)
      // and so run only when asked for by name.
      // Efficiencies from `nibble bench` on the 2-core AVX-512 machine
      // (bench/RESULTS.md). bandwidth = decode ratio: int8 MoE 0.95 (AVX-512)
      // and 0.8 (AVX2) on an idle machine; the exact kernels reached 0.9-1.0x
      // (AVX-512) and ~0.85x (AVX2) of the int8 ones' per-core ratio in the
      // same runs (one thread, CPU clock). compute = rate at 8 tokens over
      // the device's nominal f32 peak (64 flops per cycle per core on
      // AVX-512 machines): exact FP4 0.6, FP8 0.5, BF16 0.4 -> 0.5 on
      // AVX-512; AVX2 half of that on the same machine (its vectors are half
      // as wide; on an AVX2-only device the nominal peak halves too, so the
      // estimate is pessimistic there but the choice is the same); int8 FP4
      // ~1.0 (a vpdpbusd does 64 multiply-adds). ----
      {"cpu_avx512", Op::linear, kAllWeightFormats, needs_avx512, 0, 0.85, 0.5,
       "AVX-512 f32 FMA, exact: FP4 / INT4 decoded by vpermps table, FP8 via f16, BF16, F32", linear_avx512,
       nullptr},
      {"cpu_avx2", Op::linear, kAllWeightFormats, needs_avx2, 0, 0.55, 0.35,
       "AVX2 f32 FMA, exact: FP4 / INT4 decoded as bf16 by vpshufb, FP8 via F16C, BF16, F32", linear_avx2, nullptr},
      {"cpu_avx512_int8", Op::linear, kAllWeightFormats, needs_avx512, 0, 0.9, 1.0,
       "AVX-512 VNNI int8 dot (FP4 / INT4 x int8-quantized act); other formats as cpu_avx512", linear_avx512_int8,
       nullptr, kInt8Acts, kInt8ActsFormats},
      {"cpu_avx2_int8", Op::linear, kAllWeightFormats, needs_avx2, 0, 0.6, 0.5,
       "AVX2 maddubs int8 dot (FP4 / INT4 x int8-quantized act); other formats as cpu_avx2", linear_avx2_int8,
       nullptr, kInt8Acts, kInt8ActsFormats},
      // FP4 against int16 activations (fp4_int16_avx2.cpp): x rounded to
      // int16 per block of 32, vpmaddwd dot products. Resident on Zen 3
      // 1.4-1.6x the exact kernel's rate at 1-2 tokens (bench/RESULTS.md,
      // "AVX2 FP4 against int16 activations"); bandwidth as cpu_avx2_int8's,
      // compute between int8 and exact.
      {"cpu_avx2_int16", Op::linear, kAllWeightFormats, needs_avx2, 0, 0.6, 0.45,
       "AVX2 vpmaddwd int16 dot (FP4 x int16-quantized act); other formats as cpu_avx2", linear_avx2_int16,
       nullptr, kInt16Acts, kFp4Formats},
      // AMX-BF16 tiles for batches (linear_amx.cpp): MXFP4, NVFP4, BF16 and
      // FP8 (UE8M0) weights against activations split exactly into three BF16 parts,
      // from kAmxMinTokens tokens per call; other formats and fewer tokens
      // run as cpu_avx512. Exact, but not batch invariant: opt-in.
      // Efficiencies: cpu_avx512's at decode (the same kernels below 16
      // tokens); compute 1.0: from 32 tokens the tile path ran 1.3-1.6x the
      // zmm FMA peak for MXFP4 / BF16 (bench/RESULTS.md, "AMX-BF16 tiles"),
      // capped at the nominal peak; the estimate only orders explain's list,
      // as the planner never picks the kernel itself.
      {"cpu_avx512_amx", Op::linear, kAllWeightFormats, needs_amx, 0, 0.85, 1.0,
       "AMX-BF16 tiles from 16 tokens (MXFP4 / NVFP4 / BF16 / FP8-UE8M0 x activations split exactly into 3 BF16), "
       "else as cpu_avx512",
       linear_avx512_amx, nullptr, nullptr, {}, nullptr, kAmxBatchVariant},
      {"cpu_avx512", Op::moe, kAllWeightFormats, needs_avx512, 0, 0.85, 0.5,
       "AVX-512 fused MoE, exact: experts grouped per batch, rows split over threads", nullptr, moe_avx512},
      {"cpu_avx2", Op::moe, kAllWeightFormats, needs_avx2, 0, 0.7, 0.35,
       "AVX2 fused MoE, exact: experts grouped per batch, rows split over threads", nullptr, moe_avx2},
      {"cpu_avx512_int8", Op::moe, kAllWeightFormats, needs_avx512, 0, 0.95, 1.0,
       "AVX-512 fused MoE, FP4 / INT4 experts x int8-quantized activations", nullptr, moe_avx512_int8, kInt8Acts,
       kInt8ActsFormats},
      {"cpu_avx2_int8", Op::moe, kAllWeightFormats, needs_avx2, 0, 0.8, 0.5,
       "AVX2 fused MoE, FP4 / INT4 experts x int8-quantized activations", nullptr, moe_avx2_int8, kInt8Acts,
       kInt8ActsFormats},
      {"cpu_avx2_int16", Op::moe, kAllWeightFormats, needs_avx2, 0, 0.8, 0.45,
       "AVX2 fused MoE, FP4 experts x int16-quantized activations", nullptr, moe_avx2_int16, kInt16Acts,
       kFp4Formats},
      {"cpu_avx512_amx", Op::moe, kAllWeightFormats, needs_amx, 0, 0.85, 1.0,
       "AVX-512 fused MoE, experts with 16+ tokens on AMX-BF16 tiles (exact 3-way BF16 split of activations)",
       nullptr, moe_avx512_amx, nullptr, {}, nullptr, kAmxBatchVariant},
      // ---- kernels/cuda: the routed experts' grouped GEMM on tensor cores
      // (moe_w4a16.h; routing, grouping and combine in moe_router.h). The
      // CUDA backend (issue 16) binds it; its function pointer stays null
      // here. Efficiencies are targets until a
      // GPU run measures them (bench/RESULTS.md): bandwidth 0.6 of the read
      // peak (issue 15 asks >= 0.8 at decode), compute 0.3 of the BF16
      // tensor peak (one mma per 8 tokens, so a decode step uses 1/8).
      {"cuda_w4a16", Op::moe, {Format::mxfp4, Format::nvfp4, Format::int4}, needs_cuda_sm80, 0, 0.6, 0.3,
       "mma.sync m16n8k16 BF16, FP4 / INT4 (group 32) dequantized in registers from a repacked layout, f32 accumulate, "
       "tokens grouped by expert on the GPU router, gate/up fused with the clamped SwiGLU",
       nullptr, nullptr, nullptr, {}, "tensor_core"},
      // The tensor-core linears (linear_mma.h): FP8 block-128 as W8A16 (E4M3
      // dequantized to BF16 in registers, tile scale on each chunk's f32
      // partial) and BF16, both mma.sync m16n8k16 from a repacked layout.
      // Efficiencies are targets until a GPU run measures them (issue 15
      // asks >= 0.8 of the read bandwidth for FP8 GEMV at 4096x4096+).
      {"cuda_fp8_mma", Op::linear, {Format::fp8_block128}, needs_cuda_sm80, 0, 0.6, 0.3,
       "mma.sync m16n8k16 BF16, FP8 E4M3 dequantized in registers (W8A16), f32 tile scale per chunk, "
       "f32 accumulate",
       nullptr, nullptr, nullptr, {}, "tensor_core"},
      {"cuda_bf16_mma", Op::linear, {Format::bf16}, needs_cuda_sm80, 0, 0.6, 0.3,
       "mma.sync m16n8k16 BF16 from a repacked layout, f32 accumulate", nullptr, nullptr, nullptr, {},
       "tensor_core"},
      // F32 matrices (DeepSeek-V4's hyper-connection mixes: 24 or 4 rows)
      // are too small for tensor cores to matter: a warp per output on
      // CUDA cores (row_ops.h cuda_linear_f32). Efficiencies are targets.
      {"cuda_f32", Op::linear, {Format::f32}, needs_cuda_sm80, 0, 0.3, 0.1,
       "CUDA cores f32, a warp per output (small matrices)", nullptr, nullptr, nullptr, {}, "cuda_core"},
      {"cuda_fp4_native", Op::moe, kFp4Formats, native_fp4_not_built, 0, 0.8, 0.5,
       "native FP4 x FP4 MMA with block scales (not built)", nullptr, nullptr, nullptr, {}, "tensor_core"},
  };
  return registry;
}

}  // namespace nibble
