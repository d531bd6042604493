// `nibble bench`: how close the CPU kernels get to memory bandwidth.
//
//   nibble bench bandwidth                       read bandwidth, all threads
//   nibble bench linear --format F --rows R --cols C --batch B [--backend K]
//   nibble bench moe --format F --preset dsv4-flash --batch B [--backend K]
//
// The kernel is the planner's choice for the op on this machine (what a
// model would run), or the registry kernel --backend names (e.g. the opt-in
// cpu_avx512_int8), or the default kernel of the ISA --isa names, or, with
// --backend read, a stand-in that reads the weights the same way and
// computes nothing (kernels/bench_kernel.h): what plain reading gets
// through the op's structure.
//
// Every result carries the weight bytes the op must read, the median / min /
// max time of --iters timed calls, the effective bandwidth (bytes / median)
// and its ratio to the read bandwidth measured in the same run: each timed
// call is paired with a plain read of as many bytes from a cold buffer, with
// the same threads, just before or after it (alternating), so that both
// see the same machine; bandwidth_gbps is bytes / the median read time.
// (On a shared machine bandwidth drifts by several x within seconds; a
// probe minutes apart from the calls would make the ratio meaningless.)
// Weights are random in the stored format, never constant, and laid out so
// they come from DRAM: `linear` cycles through copies of the matrix that
// together exceed 4x the last-level cache; `moe` allocates all experts of a
// layer and routes each token to experts no recent call used.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_decode.h"
#include "cli/command.h"
#include "cli/load_flags.h"
#include "cli/usage_error.h"
#include "device/cuda_device.h"
#include "device/device.h"
#include "kernels/bench_kernel.h"
#include "kernels/moe_routing.h"
#include "kernels/random_weights.h"
#include "kernels/cuda/cuda_bench.h"
#include "kernels/registry.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {"--format", "F", "weight format: mxfp4, nvfp4, fp8_block128, bf16, f32, int4 (linear default fp8_block128, moe mxfp4)"},
    {"--rows", "R", "linear: output features (default 4096)"},
    {"--cols", "C", "linear: input features (default 4096)"},
    {"--batch", "B[,B...]", "tokens per call; a comma list runs each (default 1)"},
    {"--preset", "NAME", "moe: layer dimensions, dsv4-flash (256 experts, 4096 -> 2048 -> 4096, top-6 + shared)"},
    {"--routing", "MODE", "moe: random (fresh random experts per token, from DRAM; default), shared (every token of a call routes to the same fresh experts) or router (top-k of the router on random x)"},
    {"--fp8-scale", "T", "fp8_block128 scale type: ue8m0 (default) or f32"},
    {"--shared-format", "F", "moe: the shared expert's format (default: --format; DeepSeek-V4 ships fp8_block128)"},
    {"--threads", "N", "threads (default: all)"},
    {"--backend", "NAME", "kernel from the registry (cpu_ref, cpu_avx2, cpu_avx512, cpu_avx2_int8, cpu_avx512_int8, cpu_avx2_int16, cpu_avx512_amx), auto (default: the planner's choice) or read (reads the weights through the same op structure and computes nothing: plain reading's ratio)"},
    {"--isa", "NAME", "shorthand for --backend cpu_NAME: ref, avx2, avx512 (auto: the planner's choice)"},
    {"--iters", "N", "timed calls per measurement (default 20; ref 3), each paired with a bandwidth probe"},
    {"--resident", "", "linear: one in-cache copy of the weights, one thread, CPU-clock timing (compute ceiling)"},
    {"--cpu-clock", "", "with --threads 1: time calls and probe reads by the thread's CPU clock (a per-core ratio that other processes' CPU use does not skew)"},
    {"--bandwidth", "GBPS", "take this read bandwidth for the ratio instead of measuring it"},
    {"--probe-memory", "WHEN", "when the probe's buffer is first touched: interleaved with the weights (default; the same kind of memory), first or last (before / after all weights)"},
    {"--json", "", "one JSON object per measurement, one per line"},
    {"--device", "NAME", "cuda (or cuda:0): time the CUDA tensor-core kernels instead (linear: fp8_block128 / bf16; moe: mxfp4 / nvfp4 / int4 at DeepSeek-V4-Flash's layer shape), tokens 1..64 unless --batch; skipped, saying why, without a GPU"},
};

using Clock = std::chrono::steady_clock;

// Bytes the working set must exceed so that weights come from DRAM.
size_t dram_working_set() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t llc = l3 > 0 ? size_t(l3) : size_t(64) << 20;
  return std::max<size_t>(size_t(2) << 30, 4 * llc);
}

// Memory the process can still allocate: MemAvailable (free plus
// reclaimable page cache) on Linux, else the free pages.
double available_memory_bytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb > 0) return double(kb) * 1024.0;
  }
  return double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return t;
}

// CPU time of the calling thread: what a kernel costs when it runs, however
// often other processes preempt it.
double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// The paired bandwidth probe: reads `bytes` at a time from a buffer past
// 4x the LLC, moving on through it so every read is cold, on all threads.
//
// Its memory must be the same kind as the weights'. On the project's VM,
// memory first touched earlier in a run reads about half as fast as memory
// first touched later (bench linear --backend read on 64 MB of BF16: probe
// touched after the weights, probe 18 GB/s and weights 7-11; before them,
// probe 7-11 and weights 13-19; the same with the MoE layer), so a probe
// touched after the weights made every kernel look ~2x slower than a plain
// read of its own weights. So by default (--probe-memory interleaved) the
// buffer is allocated up front and first touched in pieces, piece i
// together with the weights' matrix i (touch()), and both draw from the
// same mix of memory; `first` and `last` touch it all before or after the
// weights, to show the effect.
enum class ProbeMemory { interleaved, first, last };

class ReadProbe {
 public:
  // With --bandwidth given (`given` > 0) nothing is probed: no buffer
  // either. `pieces`: how many touch() calls share out the first touch
  // (interleaved).
  ReadProbe(ThreadPool* pool, double given, int64_t pieces, ProbeMemory mode)
      : pool_(pool), given_(given), size_(dram_working_set()), pieces_(std::max<int64_t>(pieces, 1)), mode_(mode) {
    if (given_ > 0) return;
    buf_.reset(static_cast<uint64_t*>(std::aligned_alloc(4096, size_)));
    if (!buf_) fail("bench: cannot allocate the ", size_ >> 20, " MiB bandwidth probe");
    touched_.assign(size_t(pieces_), 0);
    if (mode_ == ProbeMemory::first) touch_rest();
  }

  // With `interleaved`, the first touch of piece i of [0, pieces), with
  // non-constant data; otherwise nothing. Distinct pieces may be touched
  // concurrently.
  void touch(int64_t i) {
    if (mode_ == ProbeMemory::interleaved) touch_piece(i);
  }

  // The --bandwidth value (0: the probe measures).
  double given() const { return given_; }

  // Touches what is left (all of it with `last`): call once the weights
  // exist, before timing.
  void touch_rest() {
    if (!buf_) return;
    auto job = [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) touch_piece(i);
    };
    if (pool_) pool_->parallel_for(pieces_, job);
    else job(0, pieces_, 0);
  }

  // Milliseconds to read `bytes` (rounded to whole cache lines; more than
  // the buffer holds is read as consecutive slices of it); by the calling
  // thread's CPU clock with cpu_clock (single-threaded probes only).
  double read_ms(double bytes, bool cpu_clock = false) {
    double total = 0;
    for (double left = bytes; left > 0;) {
      const double part = std::min(left, double(size_) / 2);
      total += read_slice_ms(size_t(part), cpu_clock);
      left -= part;
    }
    return total;
  }

 private:
  double read_slice_ms(size_t bytes, bool cpu_clock) {
    const size_t n = (bytes + 63) / 64 * 64;
    if (offset_ + n > size_) offset_ = 0;
    const uint64_t* p = buf_.get() + offset_ / 8;
    offset_ += n;
    const int64_t lines = int64_t(n / 64);
    const double c0 = cpu_clock ? thread_cpu_ms() : 0;
    auto t0 = Clock::now();
    auto job = [&](int64_t b, int64_t e, int) {
      // Several streams per thread, prefetched like the kernels' weights, so
      // that the probe is never the weaker reader of the two (read_lines.cpp).
      const uint8_t* start = reinterpret_cast<const uint8_t*>(p + b * 8);
      sink_.fetch_xor(read_lines(start, size_t(e - b) * 64), std::memory_order_relaxed);
    };
    if (pool_) pool_->parallel_for(lines, job, 64);
    else job(0, lines, 0);
    if (cpu_clock) return thread_cpu_ms() - c0;
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  void touch_piece(int64_t i) {
    if (!buf_ || i < 0 || i >= pieces_ || touched_[size_t(i)]) return;
    const int64_t pages = int64_t(size_ / 4096);
    const int64_t w0 = pages * i / pieces_ * 512, w1 = pages * (i + 1) / pieces_ * 512;
    for (int64_t w = w0; w < w1; ++w) buf_.get()[w] = uint64_t(w) * 0x9E3779B97F4A7C15ull;
    touched_[size_t(i)] = 1;
  }

  struct Free {
    void operator()(uint64_t* q) const { std::free(q); }
  };
  ThreadPool* pool_;
  double given_;
  size_t size_;
  int64_t pieces_;
  ProbeMemory mode_;
  std::vector<char> touched_;
  std::unique_ptr<uint64_t, Free> buf_;
  size_t offset_ = 0;
  std::atomic<uint64_t> sink_{0};  // keeps the reads from being optimised away
};

ProbeMemory parse_probe_memory(const ParsedArgs& args) {
  const std::string m = args.str("--probe-memory", "interleaved");
  if (m == "interleaved") return ProbeMemory::interleaved;
  if (m == "first") return ProbeMemory::first;
  if (m == "last") return ProbeMemory::last;
  usage_fail("flag --probe-memory: '", m, "' is not interleaved, first or last");
}

// Times `iters` calls of `call(i)` (after `warmup` untimed ones), each paired
// with a probe read of `bytes(i)` bytes, alternating which goes first.
// Returns the call times and the probe's bandwidth (GB/s over the medians),
// or the --bandwidth value if one was given.
// --bandwidth GBPS: assume this read bandwidth instead of probing it (0: probe).
double bandwidth_flag(const ParsedArgs& args) { return args.number("--bandwidth", 0, 0.001, 1e6); }
template <class Call, class Bytes>
Timing time_paired(int64_t warmup, int64_t iters, ReadProbe& probe, Call call, Bytes bytes,
                   double* bandwidth, double* mean_bytes, double* best_bandwidth,
                   bool cpu_clock = false) {
  for (int64_t i = 0; i < warmup; ++i) call(i);
  std::vector<double> ms, probe_ms;
  double total = 0;
  for (int64_t i = warmup; i < warmup + iters; ++i) {
    const double b = bytes(i);
    total += b;
    if (probe.given() <= 0 && i % 2 == 0) probe_ms.push_back(probe.read_ms(b, cpu_clock) / b);
    const double t0 = cpu_clock ? thread_cpu_ms() : 0;
    auto w0 = Clock::now();
    call(i);
    ms.push_back(cpu_clock ? thread_cpu_ms() - t0
                           : std::chrono::duration<double, std::milli>(Clock::now() - w0).count());
    if (probe.given() <= 0 && i % 2 == 1) probe_ms.push_back(probe.read_ms(b, cpu_clock) / b);
  }
  *mean_bytes = total / double(iters);
  if (probe.given() > 0) {
    *bandwidth = probe.given();
  } else {
    // Probe times per byte -> GB/s at the median.
    std::sort(probe_ms.begin(), probe_ms.end());
    const size_t m = probe_ms.size();
    const double per_byte_ms = m % 2 ? probe_ms[m / 2] : 0.5 * (probe_ms[m / 2 - 1] + probe_ms[m / 2]);
    *bandwidth = 1.0 / (per_byte_ms * 1e-3) / 1e9;
  }
  // The least disturbed probe, to set against the least disturbed call.
  *best_bandwidth = probe.given() > 0 ? probe.given() : 1.0 / (probe_ms.front() * 1e-3) / 1e9;
  return summarize(ms);
}

// --cpu-clock: only meaningful when the calling thread does all the work.
bool cpu_clock_flag(const ParsedArgs& args, const ThreadPool& pool) {
  if (!args.has("--cpu-clock")) return false;
  if (pool.size() != 1) usage_fail("flag --cpu-clock: needs --threads 1 (the thread's CPU clock sees only its own work)");
  return true;
}

// The kernel a run measures (see the top of the file).
BenchKernel resolve_backend(const ParsedArgs& args, const OpShape& shape, int threads) {
  std::string want = args.str("--backend", "auto");
  if (want == "read") {
    // Not a registry kernel: the read-only stand-ins.
    if (args.has("--isa")) usage_fail("flags --isa and --backend: give one of them");
    return read_only_bench_kernel();
  }
  if (args.has("--isa") && args.str("--isa") != "auto") {
    if (args.has("--backend") && want != "auto") usage_fail("flags --isa and --backend: give one of them");
    try {
      want = isa_kernel_name(args.str("--isa"));
    } catch (const Error& e) {
      usage_fail(e.what());  // a name that is not an ISA: the flag's value is wrong
    }
  } else {
    check_backend_name("--backend", want, shape.op == Op::moe);
  }
  // The host as the planner sees it; the bandwidth only scales the cost
  // estimates, so a nominal one spares a probe.
  const Device host = named_device("host", threads, bandwidth_flag(args) > 0 ? bandwidth_flag(args) : 10.0);
  const Selection sel = select_kernel(kernel_registry(), shape, host, want, "--backend");
  if (!sel.chosen) fail("flag --backend: no kernel can run ", format_name(shape.format), " ", op_name(shape.op), " here");
  return bench_kernel(*sel.chosen);
}

struct Result {
  std::string op, format, isa, backend, detail;
  int threads = 1;
  int64_t batch = 0, iters = 0;
  double bytes = 0;
  Timing time;
  double bandwidth = 0;
  double best_bandwidth = 0;  // from the fastest probe
};

void print(const Result& r, bool json) {
  const double gbps = r.bytes / (r.time.median_ms * 1e-3) / 1e9;
  if (json) {
    nlohmann::json j = {{"op", r.op},
                        {"format", r.format},
                        {"isa", r.isa},
                        {"backend", r.backend},
                        {"threads", r.threads},
                        {"batch", r.batch},
                        {"bytes", int64_t(std::llround(r.bytes))},  // weight bytes per call (a mean for moe)
                        {"iters", r.iters},
                        {"time_ms_median", r.time.median_ms},
                        {"time_ms_min", r.time.min_ms},
                        {"time_ms_max", r.time.max_ms},
                        {"gbps", gbps},
                        {"bandwidth_gbps", r.bandwidth},
                        {"ratio", gbps / r.bandwidth}};
    // The fastest call against the fastest probe: on a busy machine the
    // least disturbed pair says most about the kernel.
    if (r.best_bandwidth > 0) {
      const double best = r.bytes / (r.time.min_ms * 1e-3) / 1e9;
      j["gbps_best"] = best;
      j["bandwidth_best_gbps"] = r.best_bandwidth;
      j["ratio_best"] = best / r.best_bandwidth;
    }
    if (!r.detail.empty()) j["detail"] = r.detail;
    std::cout << j.dump() << std::endl;
  } else {
    const double best = r.best_bandwidth > 0 ? r.bytes / (r.time.min_ms * 1e-3) / 1e9 / r.best_bandwidth : 0;
    std::printf("%-9s %-13s %-15s batch %-3lld %9.1f MB  %8.3f ms (min %.3f, max %.3f)  %6.1f GB/s  of %5.1f GB/s = %.2f (best %.2f)\n",
                r.op.c_str(), r.format.c_str(), r.backend.c_str(), (long long)r.batch, r.bytes / 1e6,
                r.time.median_ms, r.time.min_ms, r.time.max_ms, gbps, r.bandwidth, gbps / r.bandwidth, best);
    std::fflush(stdout);
  }
}

std::vector<int64_t> parse_batches(const ParsedArgs& args) {
  return args.integer_list("--batch", "1", 1, 4096, "a batch size");
}

Format parse_weight_format(const ParsedArgs& args, const char* fallback) {
  const std::string name = args.str("--format", fallback);
  auto f = parse_format(name);
  if (!f || *f == Format::int_index)
    usage_fail("flag --format: unknown weight format '", name, "' (mxfp4, nvfp4, fp8_block128, bf16, f32, int4)");
  return *f;
}

Fp8ScaleType parse_fp8_scale(const ParsedArgs& args) {
  const std::string s = args.str("--fp8-scale", "ue8m0");
  if (s == "ue8m0") return Fp8ScaleType::ue8m0;
  if (s == "f32") return Fp8ScaleType::f32;
  usage_fail("flag --fp8-scale: '", s, "' is not ue8m0 or f32");
}

// ---- bench bandwidth ----------------------------------------------------------

int bench_bandwidth(const ParsedArgs& args, int threads, bool json) {
  // The device layer's probe (a fresh 2+ GB buffer per pass, best pass).
  const int64_t iters = args.integer("--iters", 5, 1, 1000);
  std::vector<double> ms;
  double best = 0;
  for (int64_t i = 0; i < iters; ++i) {
    double g = measure_read_bandwidth_gbps(threads, dram_working_set(), 1);
    best = std::max(best, g);
    ms.push_back(double(dram_working_set()) / (g * 1e9) * 1e3);
  }
  Result r;
  r.op = "bandwidth";
  r.format = "-";
  r.isa = "-";
  r.backend = "-";
  r.threads = threads;
  r.bytes = double(dram_working_set());
  r.iters = iters;
  r.time = summarize(ms);
  r.bandwidth = best;
  r.detail = "best pass over a cold buffer";
  print(r, json);
  return 0;
}

// ---- bench linear -------------------------------------------------------------

int bench_linear(const ParsedArgs& args, ThreadPool& pool, bool json) {
  const Format format = parse_weight_format(args, "fp8_block128");
  const int64_t rows = args.integer("--rows", 4096, 1, 1 << 20);
  const int64_t cols = args.integer("--cols", 4096, 1, 1 << 20);
  // FP4 blocks run along the input features: a partial block cannot be stored.
  if (const int64_t block = format == Format::mxfp4 || format == Format::int4 ? 32 : format == Format::nvfp4 ? 16 : 1;
      cols % block)
    usage_fail("flag --cols: ", format_name(format), " stores blocks of ", block, " input features; ", cols,
               " is not a multiple of ", block);
  const Fp8ScaleType fp8 = parse_fp8_scale(args);
  const std::vector<int64_t> batches = parse_batches(args);
  const bool resident = args.has("--resident");
  const bool cpu_clock = resident || cpu_clock_flag(args, pool);

  // Copies of one random matrix, together past 4x the LLC; each call uses the
  // next copy, so every call streams its weights from DRAM.
  OwnedWeights base = random_weights(format, rows, cols, 42, fp8);
  const double bytes = double(base.view.bytes());

  OpShape shape;
  shape.op = Op::linear;
  shape.format = format;
  shape.rows = rows;
  shape.cols = cols;
  shape.batch = *std::max_element(batches.begin(), batches.end());
  shape.bytes = bytes;
  shape.flops = 2.0 * double(rows) * double(cols) * double(shape.batch);
  const BenchKernel backend = resolve_backend(args, shape, resident ? 1 : pool.size());
  const LinearFn fn = backend.linear;
  const int64_t iters = args.integer("--iters", backend.reference ? 3 : 20, 1, 100000);
  const size_t copies = resident ? 1 : std::max<size_t>(2, size_t(double(dram_working_set()) / bytes) + 1);
  ThreadPool* p = resident ? nullptr : &pool;
  ReadProbe probe(p, bandwidth_flag(args), int64_t(copies), parse_probe_memory(args));
  std::vector<OwnedWeights> mats(copies);
  pool.parallel_for(int64_t(copies), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      OwnedWeights& m = mats[size_t(i)];
      m.data = base.data;
      m.scales = base.scales;
      m.view = base.view;
      m.view.data = m.data.data();
      m.view.scales = m.scales.empty() ? nullptr : m.scales.data();
      probe.touch(i);  // alongside the copy (see ReadProbe)
    }
  });
  probe.touch_rest();

  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  std::vector<float> x(size_t(max_batch * cols)), y(size_t(max_batch * rows));
  random_normal(x.data(), int64_t(x.size()), 7);

  size_t next = 0;
  for (int64_t batch : batches) {
    double bw = 0, bytes_per_call = 0, best_bw = 0;
    const Timing t = time_paired(
        int64_t(std::min<size_t>(copies, 8)), iters, probe,
        [&](int64_t) { fn(mats[next++ % copies].view, x.data(), batch, y.data(), p); },
        [&](int64_t) { return bytes; }, &bw, &bytes_per_call, &best_bw, cpu_clock);
    Result r;
    r.op = "linear";
    r.format = format_name(format);
    r.isa = backend.isa;
    r.backend = backend.name;
    r.threads = resident ? 1 : pool.size();
    r.batch = batch;
    r.bytes = bytes;
    r.iters = iters;
    r.time = t;
    r.bandwidth = bw;
    r.best_bandwidth = best_bw;
    r.detail = std::to_string(rows) + "x" + std::to_string(cols) +
               (format == Format::fp8_block128 ? std::string(" scales ") + (fp8 == Fp8ScaleType::f32 ? "f32" : "ue8m0") : "") +
               (resident ? ", resident, thread CPU time" : cpu_clock ? ", thread CPU time" : "");
    print(r, json);
  }
  return 0;
}

// ---- bench moe ----------------------------------------------------------------

struct MoeLayer {
  std::vector<OwnedWeights> mats;  // 3 per expert, then the shared expert's 3
  OwnedWeights gate;
  std::vector<float> bias;
  std::vector<int32_t> tid2eid;    // [vocab, top_k]
  MoeWeights w;
};

int bench_moe(const ParsedArgs& args, ThreadPool& pool, bool json) {
  const Format format = parse_weight_format(args, "mxfp4");
  Format shared_format = format;
  if (args.has("--shared-format")) {
    auto f = parse_format(args.str("--shared-format"));
    if (!f || *f == Format::int_index)
      usage_fail("flag --shared-format: unknown weight format '", args.str("--shared-format"), "'");
    shared_format = *f;
  }
  const std::string preset = args.str("--preset", "dsv4-flash");
  if (preset != "dsv4-flash") usage_fail("flag --preset: unknown preset '", preset, "' (dsv4-flash)");
  const std::string routing = args.str("--routing", "random");
  if (routing != "random" && routing != "shared" && routing != "router")
    usage_fail("flag --routing: '", routing, "' is not random, shared or router");
  const Fp8ScaleType fp8 = parse_fp8_scale(args);
  const std::vector<int64_t> batches = parse_batches(args);

  // DeepSeek-V4-Flash: hidden 4096, 256 experts of width 2048, top-6, one
  // shared expert, sqrt(softplus) scores, clamp 10, scaling 1.5.
  const int64_t D = 4096, I = 2048, E = 256, K = 6;
  OpShape shape;
  shape.op = Op::moe;
  shape.format = format;
  shape.rows = I;
  shape.cols = D;
  shape.batch = *std::max_element(batches.begin(), batches.end());
  WeightView one;  // one expert projection, for its byte count
  one.format = format;
  one.rows = I;
  one.cols = D;
  one.fp8_scale = fp8;
  one.group = format == Format::int4 ? 32 : 0;  // random_weights' INT4 group
  shape.bytes = 3.0 * double(one.bytes()) * double(K + 1);
  shape.flops = 2.0 * 3.0 * double(I * D) * double(K + 1) * double(shape.batch);
  const BenchKernel backend = resolve_backend(args, shape, pool.size());
  const MoeFn fn = backend.moe;
  if (backend.name == "read" && routing == "router")
    usage_fail("flags --backend read and --routing router: the read-only layer has no router scores to route by (use random or shared)");
  const bool cpu_clock = cpu_clock_flag(args, pool);
  const int64_t iters = args.integer("--iters", backend.reference ? 3 : 20, 1, 100000);
  MoeLayer l;
  MoeWeights& w = l.w;
  w.hidden = D;
  w.inter = I;
  w.n_experts = E;
  w.top_k = K;
  w.scoring = ScoringFunc::sqrtsoftplus;
  w.routed_scaling = 1.5f;
  w.swiglu_limit = 10.0f;
  // Refuse up front rather than be killed mid-allocation (BF16 is 13 GB).
  const double layer_bytes = double(E + 1) * 3.0 * double(random_weights(format, 16, I, 1, fp8).view.bytes()) * (D / 16.0);
  const double avail = available_memory_bytes();
  if (avail > 0 && layer_bytes + double(dram_working_set()) > 0.8 * avail)
    fail("flag --format: a ", format_name(format), " dsv4-flash layer needs ", layer_bytes / 1e9,
         " GB (plus the bandwidth probe's ", double(dram_working_set()) / 1e9, " GB); ", avail / 1e9,
         " GB of memory are available");
  ReadProbe probe(&pool, bandwidth_flag(args), 3 * (E + 1), parse_probe_memory(args));
  l.mats.resize(size_t(3 * (E + 1)));
  pool.parallel_for(3 * (E + 1), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const bool down = i % 3 == 2;
      const Format f = i >= 3 * E ? shared_format : format;  // the last three: the shared expert
      l.mats[size_t(i)] = random_weights(f, down ? D : I, down ? I : D, uint64_t(1000 + i), fp8);
      probe.touch(i);  // alongside the matrix (see ReadProbe)
    }
  });
  probe.touch_rest();
  for (int64_t e = 0; e <= E; ++e) {
    ExpertWeights ew{l.mats[size_t(3 * e)].view, l.mats[size_t(3 * e + 1)].view, l.mats[size_t(3 * e + 2)].view};
    if (e < E) w.experts.push_back(ew);
    else w.shared = ew;
  }
  w.has_shared = true;
  l.gate = random_weights(Format::bf16, E, D, 5);
  w.gate = l.gate.view;
  l.bias.resize(size_t(E));
  random_normal(l.bias.data(), E, 6, 0.01f);
  w.bias = l.bias.data();

  // Tokens: random x; with --routing random or shared, token ids index a
  // tid2eid table whose rows walk through random permutations of the
  // experts, so a call's experts were not used by the calls just before it
  // (not in any cache). random: every token its own row; shared: every token
  // of call c row c (the same K experts for the whole batch).
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t calls = iters + 8;
  const int64_t vocab = calls * max_batch;
  if (routing != "router") {
    l.tid2eid.resize(size_t(vocab * K));
    std::vector<int32_t> perm(static_cast<size_t>(E));
    uint64_t state = 12345;
    size_t used = size_t(E);
    for (auto& slot : l.tid2eid) {
      if (used == size_t(E)) {
        std::iota(perm.begin(), perm.end(), 0);
        for (size_t i = perm.size() - 1; i > 0; --i) {  // Fisher-Yates
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          std::swap(perm[i], perm[size_t((state >> 33) % (i + 1))]);
        }
        used = 0;
      }
      slot = perm[used++];
    }
    w.tid2eid = l.tid2eid.data();
    w.tid2eid_is_i64 = false;
    w.tid2eid_rows = vocab;
  }
  check_moe_weights(w);  // once; the kernels do not check per call
  std::vector<float> xs(size_t(16 * max_batch * D)), y(size_t(max_batch * D));
  random_normal(xs.data(), int64_t(xs.size()), 11);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));

  // Weight bytes of one call: the router, the distinct routed experts, the
  // shared expert.
  auto call_bytes = [&](const int32_t* call_ids, int64_t batch, const float* x) {
    std::vector<bool> hit(static_cast<size_t>(E), false);
    if (routing != "router") {
      for (int64_t t = 0; t < batch; ++t)
        for (int64_t k = 0; k < K; ++k) hit[size_t(l.tid2eid[size_t(int64_t(call_ids[t]) * K + k)])] = true;
    } else {
      std::vector<float> logits(static_cast<size_t>(batch * E));
      linear_ref(w.gate, x, batch, logits.data(), &pool);
      MoeRouting r;
      route_tokens(w, logits.data(), nullptr, batch, &r);
      for (int32_t e : r.experts) hit[size_t(e)] = true;
    }
    double bytes = double(w.gate.bytes());
    auto expert_bytes = [](const ExpertWeights& ew) {
      return double(ew.w1.bytes() + ew.w3.bytes() + ew.w2.bytes());
    };
    for (int64_t e = 0; e < E; ++e)
      if (hit[size_t(e)]) bytes += expert_bytes(w.experts[size_t(e)]);
    return bytes + expert_bytes(w.shared);
  };

  for (int64_t batch : batches) {
    for (int64_t i = 0; i < vocab; ++i) ids[size_t(i)] = int32_t(routing == "shared" ? i / batch : i);
    double bw = 0, bytes = 0, best_bw = 0;
    const Timing t = time_paired(
        8, iters, probe,
        [&](int64_t c) {
          fn(w, xs.data() + size_t((c % 16) * batch * D), ids.data() + c * batch, batch, y.data(), &pool);
        },
        [&](int64_t c) { return call_bytes(ids.data() + c * batch, batch, xs.data() + size_t((c % 16) * batch * D)); },
        &bw, &bytes, &best_bw, cpu_clock);
    Result r;
    r.op = "moe";
    r.format = format_name(format);
    r.isa = backend.isa;
    r.backend = backend.name;
    r.threads = pool.size();
    r.batch = batch;
    r.bytes = bytes;
    r.iters = iters;
    r.time = t;
    r.bandwidth = bw;
    r.best_bandwidth = best_bw;
    r.detail = "dsv4-flash, routing " + routing + ", shared expert " + format_name(shared_format) +
               (cpu_clock ? ", thread CPU time" : "");
    print(r, json);
  }
  return 0;
}

// ---- bench linear|moe --device cuda ---------------------------------------------

int bench_cuda(const std::string& what, const ParsedArgs& args, bool json) {
  const std::string dev = args.str("--device", "cuda");
  if (dev != "cuda" && dev != "cuda:0") usage_fail("flag --device: the CUDA benchmarks run on cuda (cuda:0), not '", dev, "'");
  if (what != "linear" && what != "moe") usage_fail("bench ", what, " has no --device cuda (linear, moe)");
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64};
  if (args.has("--batch")) tokens = parse_batches(args);
  const int iters = int(args.integer("--iters", 50, 1, 100000));
  const std::string fdefault = what == "linear" ? "fp8_block128" : "mxfp4";
  const std::string fname = args.str("--format", fdefault);
  const auto format = parse_format(fname);
  if (!format) usage_fail("flag --format: unknown format '", fname, "'");
  if (!cuda_probe().error.empty()) {
    std::printf("bench %s --device cuda: skipped: %s\n", what.c_str(), cuda_probe().error.c_str());
    return 0;
  }
  CudaBenchReport r =
      what == "linear" ? cuda_bench_linear(*format, args.integer("--rows", 4096, 1, 1 << 20),
                                           args.integer("--cols", 4096, 1, 1 << 20), tokens, iters)
                       : cuda_bench_moe(*format, tokens, iters);
  if (what == "moe") {
    // The whole layer as the backend will launch it, after the kernels alone.
    const CudaBenchReport layer = cuda_bench_moe_layer(*format, tokens, iters);
    r.rows.insert(r.rows.end(), layer.rows.begin(), layer.rows.end());
  }
  if (!json)
    std::printf("device %s: read bandwidth %.0f GB/s (measured now), BF16 tensor peak %.0f TFLOP/s (nominal)\n",
                r.device.c_str(), r.read_gbps, r.tc_peak_gflops / 1e3);
  for (const CudaBenchRow& row : r.rows) {
    if (json) {
      nlohmann::json j = {{"op", row.op},          {"format", row.format},         {"tokens", row.tokens},
                          {"experts", row.experts}, {"k_splits", row.k_splits},     {"us", row.us},
                          {"best_split", row.best_split}, {"best_us", row.best_us},
                          {"bytes", row.bytes},     {"gbps", row.gbps},             {"read_gbps", r.read_gbps},
                          {"ratio", row.read_ratio}, {"tensor_ratio", row.tc_ratio}, {"device", r.device}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-7s %-12s tokens %3lld  experts %3lld  split %2d  %9.1f us  %7.0f GB/s  %.2f of read bw  "
                  "%.3f of tensor peak  (best split %d: %.1f us)\n",
                  row.op.c_str(), row.format.c_str(), (long long)row.tokens, (long long)row.experts, row.k_splits,
                  row.us, row.gbps, row.read_ratio, row.tc_ratio, row.best_split, row.best_us);
    }
  }
  return 0;
}

int run_bench(const std::vector<std::string>& argv) {
  // `decode` benchmarks a whole model and has flags of its own.
  if (!argv.empty() && argv[0] == "decode") return bench_decode(std::vector<std::string>(argv.begin() + 1, argv.end()));
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble bench bandwidth|linear|moe|decode [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Measures the CPU kernels against memory bandwidth. `bandwidth` reads a\n"
                             "buffer far past the last-level cache with all threads; `linear` times one\n"
                             "matrix op (Y = X W^T) and `moe` one DeepSeek-V4-Flash MoE layer, with\n"
                             "random weights in the given format streamed from DRAM. Each result gives\n"
                             "the weight bytes read, median/min/max time, GB/s, and the ratio to the\n"
                             "read bandwidth measured in the same run.",
                             kOptions);
    return 0;
  }
  if (args.positional.size() != 1) usage_fail("expected one of bandwidth, linear, moe, decode (usage: ", usage, ")");
  const int threads = threads_arg(args);  // warns above the hardware's count
  const bool json = args.has("--json");
  const std::string what = args.positional[0];
  if (args.has("--device")) return bench_cuda(what, args, json);
  if (what == "bandwidth") return bench_bandwidth(args, threads <= 0 ? ThreadPool::hardware_threads() : threads, json);
  ThreadPool pool(threads);
  if (what == "linear") return bench_linear(args, pool, json);
  if (what == "moe") return bench_moe(args, pool, json);
  usage_fail("unknown benchmark '", what, "' (bandwidth, linear, moe, decode)");
}

RegisterCommand reg({"bench", "measure kernels and models against memory bandwidth (bandwidth, linear, moe, decode)",
                     run_bench});

}  // namespace
}  // namespace nibble::cli
