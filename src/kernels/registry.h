// The kernel registry and the planner. Every kernel nibble has is one
// KernelDesc in one flat list (registry.cpp); select_kernel() is a pure
// function of (op, format, shape, batch, device, user override) returning the
// choice and every rejected candidate with its reason. `nibble explain`
// prints exactly what it returns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"
#include "format/format.h"
#include "kernels/linear.h"
#include "kernels/moe.h"

namespace nibble {

enum class Op { linear, moe };
const char* op_name(Op op);

// One op instance to plan.
struct OpShape {
  Op op = Op::linear;
  Format format = Format::bf16;  // weight format (for moe: the experts')
  int64_t rows = 0, cols = 0;    // weight matrix (for moe: one expert projection)
  int64_t batch = 1;             // tokens per call
  double bytes = 0;              // weight bytes the op reads per call
  double flops = 0;              // arithmetic per call
};

struct KernelDesc {
  const char* name;              // "cpu_avx512"; unique per op
  Op op;
  std::vector<Format> formats;   // weight formats it runs
  // "" when `device` can run it, else the reason it cannot (named features).
  std::string (*unsupported)(const Device& device);
  int64_t max_batch;             // largest batch it is meant for; 0 = any
  // Cost model: time = max(bytes / (bandwidth * bw_eff), flops / (peak * flop_eff)).
  // The efficiencies are measured (bench/), not guessed; see registry.cpp.
  double bandwidth_efficiency;
  double compute_efficiency;
  const char* units;             // what executes it: "scalar f64", "AVX-512 VNNI int8"
  LinearFn linear = nullptr;     // op == linear
  MoeFn moe = nullptr;           // op == moe
  // Non-null: the kernel rounds something the reference does not (e.g.
  // "quantizes activations to int8") for the weight formats in
  // `lossy_formats`. The planner never picks such a kernel on its own, for
  // any format; only a forced backend (--moe-backend / --linear-backend
  // NAME) runs it.
  const char* lossy = nullptr;
  std::vector<Format> lossy_formats = {};
  // The class of unit that executes it, for `explain --json`'s kernel_units:
  // "tensor_core", "cuda_core", "cpu_simd" or "scalar". Null: a CPU kernel,
  // "scalar" for cpu_ref and "cpu_simd" for the others (kernel_unit_class).
  const char* unit_class = nullptr;
  // Non-null: why a token's results can differ (in the last bits) with the
  // number of tokens in its call, e.g. "sums in another order on AMX tiles
  // from 16 tokens per call". Like a lossy kernel, such a kernel is never
  // the planner's own choice, only a forced backend's.
  const char* batch_variant = nullptr;
};

const char* kernel_unit_class(const KernelDesc& k);

const std::vector<KernelDesc>& kernel_registry();

struct Rejection {
  std::string kernel;
  std::string reason;
};

// Whether `k` is lossy for weights of format `f`.
bool kernel_is_lossy(const KernelDesc& k, Format f);

struct Selection {
  const KernelDesc* chosen = nullptr;  // null when nothing can run it
  double cost_s = 0;                   // the chosen kernel's estimate
  std::vector<Rejection> rejected;     // every other candidate of this op
  std::string why;                     // why the chosen one won
};

// Estimated seconds for `shape` with `k` on `device`.
double kernel_cost_s(const KernelDesc& k, const OpShape& shape, const Device& device);

// `override_name` is "" or "auto" for the planner's choice (the cheapest
// runnable kernel that is not opt-in, see KernelDesc::lossy), else a kernel
// name; a named kernel that does not exist or cannot run the op is an error
// (nibble::Error naming `flag`), never a silent fallback.
Selection select_kernel(const std::vector<KernelDesc>& registry, const OpShape& shape,
                        const Device& device, const std::string& override_name = "auto",
                        const std::string& flag = "--linear-backend");

}  // namespace nibble
