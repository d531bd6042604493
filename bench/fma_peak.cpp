// The machine's FMA peak per core, measured: 12 independent FMA chains
// (more than latency x throughput on any x86 core) of zmm and of ymm
// vectors, one thread, timed by the thread's CPU clock, and the clock from a
// chain of dependent integer multiplies. Not part of the build:
//   g++ -O2 -o /tmp/fma_peak bench/fma_peak.cpp && /tmp/fma_peak
// Zen 4 (2026-12-01): 3.66 GHz, 117 GFLOP/s for zmm and ymm alike (two
// 256-bit FMA pipes; a 512-bit FMA takes both), i.e. 32 flop/cycle.
// Zen 5 EPYC (2026-12-08): 4.11-4.18 GHz, zmm 259-268 GFLOP/s, ymm 130-134
// (two 512-bit FMA pipes: 64 flop/cycle).
// Where the CPU has AMX-BF16 (and Linux grants the tile state), also the
// tile unit's TDPBF16PS peak: 4 independent 16 x 16 accumulators, operands
// in tile registers; the exact kernels (linear_amx.cpp) run three tile
// products per weight tile, so a third of it is their ceiling.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cpuid.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
static double now() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define DECL(T, set) T a0=set(1.f),a1=set(1.1f),a2=set(1.2f),a3=set(1.3f),a4=set(1.4f),a5=set(1.5f),a6=set(1.6f),a7=set(1.7f),a8=set(1.8f),a9=set(1.9f),a10=set(2.f),a11=set(2.1f);
#define STEP(f) a0=f(a0,m,c);a1=f(a1,m,c);a2=f(a2,m,c);a3=f(a3,m,c);a4=f(a4,m,c);a5=f(a5,m,c);a6=f(a6,m,c);a7=f(a7,m,c);a8=f(a8,m,c);a9=f(a9,m,c);a10=f(a10,m,c);a11=f(a11,m,c);
__attribute__((target("avx512f"))) double zmm(long n) {
  DECL(__m512, _mm512_set1_ps) const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  double t0 = now();
  for (long k = 0; k < n; ++k) { STEP(_mm512_fmadd_ps) }
  double dt = now() - t0;
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)),_mm512_add_ps(_mm512_add_ps(a4,a5),_mm512_add_ps(a6,a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8,a9),_mm512_add_ps(a10,a11)));
  if (_mm512_reduce_add_ps(s) == 12345.f) printf("x");
  return 12.0 * n * 32 / dt / 1e9;
}
__attribute__((target("avx2,fma"))) double ymm(long n) {
  DECL(__m256, _mm256_set1_ps) const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  double t0 = now();
  for (long k = 0; k < n; ++k) { STEP(_mm256_fmadd_ps) }
  double dt = now() - t0;
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0,a1),_mm256_add_ps(a2,a3)),_mm256_add_ps(_mm256_add_ps(a4,a5),_mm256_add_ps(a6,a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8,a9),_mm256_add_ps(a10,a11)));
  alignas(32) float b[8]; _mm256_store_ps(b, s); if (b[0] == 12345.f) printf("x");
  return 12.0 * n * 16 / dt / 1e9;
}
// The clock from a chain of dependent imuls (3 cycles each on every x86 core
// since Nehalem / Zen). A chain of "add $1" read 10-16 GHz on a Sapphire
// Rapids class Xeon (2026-12-07): its renamer folds add-immediate chains.
double clock_ghz(long n) {
  long x = 3; double t0 = now();
  for (long k = 0; k < n; ++k) __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(x));
  return 4.0 * 3 * n / (now() - t0) / 1e9;
}
bool amx_here() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;  // ARCH_REQ_XCOMP_PERM, XTILEDATA
}
__attribute__((target("amx-tile,amx-bf16"))) double amx(long n) {
  struct alignas(64) { uint8_t palette, start, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg{};
  cfg.palette = 1;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) static uint16_t ones[512];
  for (uint16_t& v : ones) v = 0x3F80;  // 1.0
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64); _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
  double t0 = now();
  for (long k = 0; k < n; ++k) {
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  double dt = now() - t0;
  _tile_release();
  return 4.0 * n * 16 * 16 * 32 * 2 / dt / 1e9;
}
int main() {
  const bool tiles = amx_here();
  for (int r = 0; r < 3; ++r) {
    printf("clock %.2f GHz", clock_ghz(500000000));
    // An AVX2-only CPU (Zen 3, say) dies on the zmm loop with SIGILL.
    if (__builtin_cpu_supports("avx512f")) printf("  zmm FMA %.1f GFLOP/s", zmm(200000000));
    printf("  ymm FMA %.1f GFLOP/s", ymm(200000000));
    if (tiles) printf("  AMX TDPBF16PS %.1f GFLOP/s", amx(5000000));
    printf("\n");
  }
}
