// Issue rates per core of the operations the exact AVX-512 kernels are made
// of, alone and mixed, to tell which resource bounds a loop: 512-bit FMAs
// from registers, FMAs that take a 512-bit load (as the kernels' FMAs take
// their activations), a load feeding two FMAs, a 4 x 4 register tile's
// step, loads alone, vpermps (the FP4 decode), vpsrld / vpsrldq (its
// shifts). One thread, the thread's CPU clock, each body 10-16 independent
// chains (more than latency x throughput), rates in operations per
// nanosecond and per cycle at the clock of an imul chain measured between
// them. Not part of the build:
//   g++ -O2 -mavx512f -o /tmp/load_fma_rates bench/load_fma_rates.cpp && /tmp/load_fma_rates
// Needs AVX-512F; dies with SIGILL without it.
//
// Sapphire Rapids class Xeon guest, 2026-12-07 (bench/results/
// 2153_ops_vs_ggml_spr_avx512.txt): FMAs from registers 1.9 per cycle and
// loads alone 2 per cycle, but FMAs that each take a 512-bit load (a memory
// operand, or a load and then the FMA) only 1.25, a load feeding two FMAs
// 1.57, and a 4 x 4 register tile (each load feeding four FMAs) 1.6. So a
// 512-bit load that feeds an FMA costs about half an FMA's issue slot; a
// many-token loop whose FMAs each read one activation vector
// (fp4_f32_avx512.cpp's passes of 8: 64 such FMAs of 72 per group) is held
// near 0.5 of the FMA peak by that more than by its decode.
//
// Zen 5 EPYC, 2026-12-08 (bench/results/0104_ops_vs_ggml_zen5_avx512.txt):
// FMAs from registers 1.93 per cycle and with a memory operand 1.89 (no
// penalty), loads alone 1.8-1.9, vpermps 2.0, but FMA + vpermps 1:1 only
// 2.1-2.2 ops per cycle in all: the FP4 decode's vpermps takes FMA issue
// slots there. With FMAs at 2 and loads at ~2 per cycle, a pass that loads
// an activation for every FMA is at both limits at once; the passes of 8
// now load each activation vector once for two rows.
#include <cstdio>
#include <ctime>

static double now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Dependent imuls, 3 cycles each (add-immediate chains are folded by some
// renamers, see fma_peak.cpp).
static double clock_ghz() {
  long x = 3, n = 100000000;
  double t0 = now();
  for (long k = 0; k < n; ++k) __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(x));
  return 4.0 * 3 * n / (now() - t0) / 1e9;
}

alignas(64) static float buf[1024];

// Times `body` (ops operations) n times, prints ops per ns and per cycle.
#define RATE(name, ops, body)                                                                              \
  {                                                                                                        \
    const long n = 30000000;                                                                               \
    double t0 = now();                                                                                     \
    for (long k = 0; k < n; ++k)                                                                           \
      __asm__ volatile(body ::"r"(buf)                                                                     \
                       : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",   \
                         "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28",  \
                         "xmm29");                                                                         \
    const double per_ns = double(ops) * n / (now() - t0) / 1e9;                                           \
    printf("  %-40s %5.2f per ns  %4.2f per cycle\n", name, per_ns, per_ns / ghz);                       \
  }

#define FMA_REG(i) "vfmadd231ps %%zmm21, %%zmm20, %%zmm" #i "\n\t"
#define FMA_MEM(i, off) "vfmadd231ps " #off "(%0), %%zmm20, %%zmm" #i "\n\t"
#define LOAD_FMA2(t, i, j, off)                                                                 \
  "vmovups " #off "(%0), %%zmm" #t "\n\t"                                                       \
  "vfmadd231ps %%zmm" #t ", %%zmm20, %%zmm" #i "\n\t"                                           \
  "vfmadd231ps %%zmm" #t ", %%zmm21, %%zmm" #j "\n\t"
// A 4 x 4 register tile's step: 4 weight and 4 activation vectors loaded,
// each feeding 4 of 16 FMAs (into zmm0-15).
#define F(a, w, x) "vfmadd231ps %%zmm" #w ", %%zmm" #x ", %%zmm" #a "\n\t"
#define TILE4(off)                                                                                         \
  "vmovaps " #off "(%0), %%zmm22\n\tvmovaps " #off "+64(%0), %%zmm23\n\t"                                 \
  "vmovaps " #off "+128(%0), %%zmm24\n\tvmovaps " #off "+192(%0), %%zmm25\n\t"                            \
  "vmovaps " #off "+256(%0), %%zmm26\n\tvmovaps " #off "+320(%0), %%zmm27\n\t"                            \
  "vmovaps " #off "+384(%0), %%zmm28\n\tvmovaps " #off "+448(%0), %%zmm29\n\t"                            \
  F(0, 22, 26) F(1, 22, 27) F(2, 22, 28) F(3, 22, 29) F(4, 23, 26) F(5, 23, 27) F(6, 23, 28) F(7, 23, 29)  \
  F(8, 24, 26) F(9, 24, 27) F(10, 24, 28) F(11, 24, 29) F(12, 25, 26) F(13, 25, 27) F(14, 25, 28)        \
  F(15, 25, 29)
#define LOAD(i, off) "vmovups " #off "(%0), %%zmm" #i "\n\t"
#define PERM(i) "vpermps %%zmm20, %%zmm21, %%zmm" #i "\n\t"
#define SRL(i) "vpsrld $4, %%zmm21, %%zmm" #i "\n\t"
#define SRLDQ(i) "vpsrldq $1, %%zmm21, %%zmm" #i "\n\t"

int main() {
  for (float& f : buf) f = 1.0f;
  for (int round = 0; round < 2; ++round) {
    const double ghz = clock_ghz();
    printf("clock %.2f GHz\n", ghz);
    RATE("zmm FMA, registers", 10,
         FMA_REG(0) FMA_REG(1) FMA_REG(2) FMA_REG(3) FMA_REG(4) FMA_REG(5) FMA_REG(6) FMA_REG(7) FMA_REG(8) FMA_REG(9))
    RATE("zmm FMA, 512-bit memory operand", 10,
         FMA_MEM(0, 0) FMA_MEM(1, 64) FMA_MEM(2, 128) FMA_MEM(3, 192) FMA_MEM(4, 256) FMA_MEM(5, 320)
             FMA_MEM(6, 384) FMA_MEM(7, 448) FMA_MEM(8, 512) FMA_MEM(9, 576))
    RATE("zmm FMA, a load feeding two (FMAs)", 20,
         LOAD_FMA2(22, 0, 1, 0) LOAD_FMA2(23, 2, 3, 64) LOAD_FMA2(24, 4, 5, 128) LOAD_FMA2(25, 6, 7, 192)
             LOAD_FMA2(26, 8, 9, 256) LOAD_FMA2(27, 0, 1, 320) LOAD_FMA2(28, 2, 3, 384) LOAD_FMA2(29, 4, 5, 448)
                 LOAD_FMA2(22, 6, 7, 512) LOAD_FMA2(23, 8, 9, 576))
    RATE("zmm FMA, 4 x 4 tile (8 loads, 16 FMAs)", 32, TILE4(0) TILE4(512))
    RATE("zmm loads", 10,
         LOAD(0, 0) LOAD(1, 64) LOAD(2, 128) LOAD(3, 192) LOAD(4, 256) LOAD(5, 320) LOAD(6, 384) LOAD(7, 448)
             LOAD(8, 512) LOAD(9, 576))
    RATE("vpermps zmm", 10, PERM(0) PERM(1) PERM(2) PERM(3) PERM(4) PERM(5) PERM(6) PERM(7) PERM(8) PERM(9))
    RATE("vpsrld zmm", 10, SRL(0) SRL(1) SRL(2) SRL(3) SRL(4) SRL(5) SRL(6) SRL(7) SRL(8) SRL(9))
    RATE("vpsrld + vpermps (1:1)", 10, SRL(0) PERM(1) SRL(2) PERM(3) SRL(4) PERM(5) SRL(6) PERM(7) SRL(8) PERM(9))
    RATE("vpsrldq + vpermps (1:1)", 10,
         SRLDQ(0) PERM(1) SRLDQ(2) PERM(3) SRLDQ(4) PERM(5) SRLDQ(6) PERM(7) SRLDQ(8) PERM(9))
    RATE("zmm FMA (registers) + vpermps (1:1)", 10,
         FMA_REG(0) PERM(1) FMA_REG(2) PERM(3) FMA_REG(4) PERM(5) FMA_REG(6) PERM(7) FMA_REG(8) PERM(9))
  }
}
