// One layer's MLA decode attention (model/deepseek_v3_attention.h), timed:
// one token at position T - 1 against a cache of T rows, with Kimi K2 shapes
// (H = 64) and DeepSeek-V3 shapes (H = 128), C = 512, r = 64, n = v = 128,
// per ISA path (ref = the portable per-(token, head) loop, the kernel nibble
// ran before the head-blocked SIMD kernels) and thread count. Built with the
// project (target mla_decode_bench):
//   build/release/mla_decode_bench [--contexts 1024,8192,32768] [--threads 1,2]
//       [--isa ref,avx2,avx512] [--models kimi,dsv3] [--reps 7] [--copies 1] [--tokens 1]
// Each row: ms per token per layer (median and best of --reps calls after a
// warm-up), GFLOP/s of the median (2 flop per multiply-add of the absorbed
// formula: H (n C + T (C + r) + T C + v C)), that against the FMA peak
// measured at start (per core, zmm FMA chains, x threads), the bytes a call
// must read at least once (cache T (C + r) f32 + kv_b H (n + v) C f32) and
// their rate, and ms per token for 61 such layers. cpu_ms: the calling
// thread's CPU time per call (median): with 1 thread, the time the call
// really had a core, which other jobs on the machine do not inflate. --copies K cycles the
// calls through K independent layers (cache + kv_b each) so that, with K
// large enough, the data comes from DRAM instead of the last-level cache.
// --tokens P feeds a prefill chunk of P tokens ending at position T - 1 per
// call instead of one token (times are then per call, not per token).
//
// GCC 12's _mm512_reduce_add_ps builds on _mm256_undefined_pd(), whose
// self-initialisation trips -Wuninitialized (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "model/deepseek_v3_attention.h"
#include "util/thread_pool.h"

using namespace nibble;

namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// One core's zmm FMA rate (bench/fma_peak.cpp's probe): 12 independent
// chains, timed on the thread's CPU clock so that other jobs on the core do
// not lower it. Best of 3.
__attribute__((target("avx512f"))) double fma_peak_gflops() {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 0.1f * float(i));
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    const long n = 20000000;
    const double t0 = thread_seconds();
    for (long k = 0; k < n; ++k)
      for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    const double dt = thread_seconds() - t0;
    __m512 s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
    if (_mm512_reduce_add_ps(s) == 12345.f) std::printf("x");
    best = std::max(best, 12.0 * double(n) * 32 / dt / 1e9);
  }
  return best;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Layer {
  std::vector<float> kv_b;  // [H (n + v), C]
  HostMlaCache host{MlaShape{}};  // its cache: T - tokens rows before the call
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> contexts = {"1024", "8192", "32768"}, threads = {"1", "2"},
                           isas = {"ref", "avx2", "avx512"}, models = {"kimi", "dsv3"};
  int reps = 7, copies = 1;
  int64_t tokens = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--contexts") contexts = split(v);
    else if (k == "--threads") threads = split(v);
    else if (k == "--isa") isas = split(v);
    else if (k == "--models") models = split(v);
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--copies") copies = std::atoi(v.c_str());
    else if (k == "--tokens") tokens = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const double peak_core = fma_peak_gflops();
  std::printf("# FMA peak per core (zmm chains, thread CPU time): %.1f GFLOP/s; load %s\n", peak_core,
              loadavg().c_str());
  std::printf("# %-5s %6s %-6s %3s %9s %9s %8s %7s %8s %9s %9s %7s %10s  %s\n", "model", "T", "isa", "thr", "ms_med",
              "ms_best", "GFLOP/s", "%peak", "cpu_ms", "cache_MB", "kvb_MB", "GB/s", "model_ms", "load");
  const int64_t C = 512, R = 64, N = 128, V = 128;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const std::string& model : models) {
    const int64_t H = model == "dsv3" ? 128 : 64;
    const MlaShape s{H, N, R, V, C, 1.0f / std::sqrt(float(N + R))};
    for (const std::string& ts : contexts) {
      const int64_t T = std::atoll(ts.c_str());
      std::vector<Layer> layers(static_cast<size_t>(copies));
      for (Layer& l : layers) {
        l.host = HostMlaCache(s);
        l.kv_b.resize(size_t(H * (N + V) * C));
        for (float& x : l.kv_b) x = nd(rng) / std::sqrt(float(C));
        l.host.cache.latent.resize(size_t(T * C));
        l.host.cache.k_rope.resize(size_t(T * R));
        for (float& x : l.host.cache.latent) x = nd(rng);
        for (float& x : l.host.cache.k_rope) x = nd(rng);
      }
      std::vector<float> q(size_t(tokens * H * (N + R))), o(size_t(tokens * H * V));
      for (float& x : q) x = nd(rng);
      const std::vector<float> lat_new(layers[0].host.cache.latent.end() - tokens * C, layers[0].host.cache.latent.end());
      const std::vector<float> kr_new(layers[0].host.cache.k_rope.end() - tokens * R, layers[0].host.cache.k_rope.end());
      for (const std::string& isa_name : isas) {
        const CpuIsa isa = parse_cpu_isa(isa_name);
        for (const std::string& th : threads) {
          const int nt = std::atoi(th.c_str());
          ThreadPool pool(nt);
          std::vector<double> ms, cpu;
          for (int r = 0; r <= reps; ++r) {
            Layer& l = layers[size_t(r % copies)];
            l.host.cache.latent.resize(size_t((T - tokens) * C));  // shrinking keeps the capacity: no reallocation
            l.host.cache.k_rope.resize(size_t((T - tokens) * R));
            const MlaSeq seq{&l.host, tokens, T - tokens};
            const double c0 = thread_seconds();
            const auto t0 = std::chrono::steady_clock::now();
            mla_attend_cpu(s, l.kv_b.data(), seq, q.data(), lat_new.data(), kr_new.data(), o.data(), &pool, isa);
            const auto t1 = std::chrono::steady_clock::now();
            const double c1 = thread_seconds();
            if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            if (r > 0) cpu.push_back(1e3 * (c1 - c0));
          }
          std::sort(ms.begin(), ms.end());
          std::sort(cpu.begin(), cpu.end());
          const double med = ms[ms.size() / 2], best = ms[0];
          double flop = 0;  // token t of the chunk sees T - tokens + t + 1 rows
          for (int64_t t = 0; t < tokens; ++t)
            flop += 2.0 * double(H) * double(N * C + (T - tokens + t + 1) * (2 * C + R) + V * C);
          const double gflops = flop / (med * 1e6);
          const double cache_mb = double(T * (C + R) * 4) / 1e6, kvb_mb = double(H * (N + V) * C * 4) / 1e6;
          std::printf("  %-5s %6lld %-6s %3d %9.3f %9.3f %8.1f %6.1f%% %8.3f %9.2f %9.2f %7.1f %10.1f  %s\n",
                      model.c_str(), (long long)T, isa_name.c_str(), nt, med, best, gflops,
                      100.0 * gflops / (peak_core * nt), cpu[cpu.size() / 2], cache_mb, kvb_mb, (cache_mb + kvb_mb) / med, 61 * med,
                      loadavg().c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
