// Batch invariance of every registered linear and MoE kernel: a token's
// output is bit-identical whatever else is in the call. For each kernel the
// host can run, each weight format it lists, random weights of awkward
// shapes and 70 random tokens: every token is first run alone (n = 1, no
// pool), then batches of n = 1..9, 13, 17, 33, 70 tokens drawn in random
// order (so a token sits at every position, next to different neighbours)
// run on pools of 1 and 2 threads, and each output row must equal (memcmp)
// the token's row from its own call. MoE layers also route the tokens
// differently per batch (top-k over a small expert count, so tokens share
// experts in changing groups; and hash routing whose table repeats
// experts). A last test checks that the planner's default kernel for an op
// does not change with the batch either.
//
// Why: batched forward steps put several sequences into one call, and a
// sequence's tokens must not depend on which others were scheduled with it
// (reproducible sampling, prefix caches, tests of batched against single
// decode). The lossy int8 kernels are held to the same rule: their rounding
// is per token, so it must not depend on the batch either.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "kernels/cpu/kernels_x86.h"
#include "kernels/random_weights.h"
#include "kernels/registry.h"
#include "support/random_moe_layer.h"
#include "util/thread_pool.h"

namespace nibble {
namespace {

constexpr int64_t kTokens = 70;  // distinct tokens per case
constexpr int64_t kBatches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 33, 70};

const Device& host() {
  static const Device d = host_cpu_device(2, 10.0);  // bandwidth given: no probe
  return d;
}

// A deterministic permutation of [0, n) (Fisher-Yates over splitmix64).
std::vector<int32_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = int32_t(i);
  uint64_t s = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::swap(p[size_t(i)], p[size_t(z % uint64_t(i + 1))]);
  }
  return p;
}

// Registry indices of the kernels of `op`.
std::vector<size_t> kernels_of(Op op) {
  std::vector<size_t> out;
  for (size_t i = 0; i < kernel_registry().size(); ++i)
    if (kernel_registry()[i].op == op) out.push_back(i);
  return out;
}

std::string kernel_test_name(const ::testing::TestParamInfo<size_t>& info) {
  return kernel_registry()[info.param].name;
}

// Runs `call(tokens, n, y, pool)` for every batch and pool and compares each
// output row ([width] floats) with `alone`. Reports the first mismatch of
// the case and returns.
// Batches below `min_batch` are not compared.
template <class Call>
void expect_rows_match(const std::vector<float>& alone, int64_t width, uint64_t seed, Call call,
                       int64_t min_batch = 1) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t n : kBatches) {
      if (n < min_batch) continue;
      const std::vector<int32_t> perm = permutation(kTokens, seed + uint64_t(1000 * threads + n));
      const std::vector<int32_t> tokens(perm.begin(), perm.begin() + n);
      std::vector<float> y(size_t(n * width), -12345.0f);
      call(tokens, n, y.data(), &pool);
      for (int64_t j = 0; j < n; ++j) {
        const float* got = y.data() + j * width;
        const float* want = alone.data() + int64_t(tokens[size_t(j)]) * width;
        if (std::memcmp(got, want, size_t(width) * sizeof(float)) == 0) continue;
        int64_t c = 0;
        while (std::memcmp(got + c, want + c, sizeof(float)) == 0) ++c;
        ADD_FAILURE() << "n=" << n << " threads=" << threads << ": token " << tokens[size_t(j)] << " at position "
                      << j << ", output " << c << ": " << got[c] << " vs " << want[c] << " alone (diff "
                      << got[c] - want[c] << ")";
        return;
      }
    }
  }
}

// ---- linear -------------------------------------------------------------------

struct LinearCase {
  Format format;
  int64_t rows, cols;
  Fp8ScaleType fp8 = Fp8ScaleType::ue8m0;
};

// Rows not multiples of any row block (1..4) nor of the thread chunks (16),
// columns with every tail the kernels have (partial 128 / 64-column groups,
// NVFP4's 16-column blocks, FP8's partial tiles, > 64 FP8 tiles), and FP4
// rows of 8 KB and more (AVX-512 runs one token four rows at a time there).
const LinearCase kLinearCases[] = {
    {Format::mxfp4, 70, 416},  {Format::mxfp4, 37, 160}, {Format::mxfp4, 11, 4096}, {Format::mxfp4, 9, 16416},
    {Format::nvfp4, 70, 400},  {Format::nvfp4, 21, 144}, {Format::nvfp4, 6, 4112},  {Format::nvfp4, 6, 16400},
    {Format::fp8_block128, 150, 300}, {Format::fp8_block128, 5, 8320},
    {Format::fp8_block128, 131, 200, Fp8ScaleType::f32},
    {Format::bf16, 45, 200},   {Format::bf16, 9, 17},     {Format::bf16, 6, 4128},   {Format::bf16, 11, 300},
    {Format::f32, 33, 100},    {Format::f32, 7, 4100},
};

class LinearBatchInvariance : public ::testing::TestWithParam<size_t> {};

TEST_P(LinearBatchInvariance, TokenRowsEqualTheTokenAlone) {
  const KernelDesc& k = kernel_registry()[GetParam()];
  if (std::string why = k.unsupported(host()); !why.empty()) GTEST_SKIP() << why;
  uint64_t seed = 1;
  for (const LinearCase& c : kLinearCases) {
    seed += 7919;
    bool listed = false;
    for (Format f : k.formats) listed |= f == c.format;
    if (!listed) continue;
    SCOPED_TRACE(std::string(k.name) + " " + format_name(c.format) +
                 (c.fp8 == Fp8ScaleType::f32 ? "(f32 scales)" : "") + " [" + std::to_string(c.rows) + " x " +
                 std::to_string(c.cols) + "]");
    OwnedWeights w = random_weights(c.format, c.rows, c.cols, seed, c.fp8);
    std::vector<float> x(size_t(kTokens * c.cols));
    random_normal(x.data(), int64_t(x.size()), seed + 1);
    // Tokens of different magnitudes, so the int8 blocks' scales differ.
    for (int64_t t = 0; t < kTokens; ++t)
      for (int64_t j = 0; j < c.cols; ++j) x[size_t(t * c.cols + j)] *= float(1 + t % 5) * 0.5f;
    std::vector<float> alone(size_t(kTokens * c.rows));
    auto batch = [&](const std::vector<int32_t>& tokens, int64_t n, float* y, ThreadPool* pool) {
      std::vector<float> xb(size_t(n * c.cols));
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(xb.data() + j * c.cols, x.data() + int64_t(tokens[size_t(j)]) * c.cols, size_t(c.cols) * 4);
      k.linear(w.view, xb.data(), n, y, pool);
    };
    if (!k.batch_variant) {
      for (int64_t t = 0; t < kTokens; ++t)
        k.linear(w.view, x.data() + t * c.cols, 1, alone.data() + t * c.rows, nullptr);
      expect_rows_match(alone, c.rows, seed, batch);
      continue;
    }
    // A batch-variant kernel (the AMX one) still owes invariance among the
    // batches of its tile path (x86::kAmxMinTokens tokens and more): each
    // token alone is then the token in a call with the next 15 tokens.
    const int64_t m = x86::kAmxMinTokens;
    for (int32_t t = 0; t < int32_t(kTokens); ++t) {
      std::vector<int32_t> tokens;
      for (int64_t j = 0; j < m; ++j) tokens.push_back(int32_t((t + j) % kTokens));
      std::vector<float> y(size_t(m * c.rows));
      batch(tokens, m, y.data(), nullptr);
      std::memcpy(alone.data() + t * c.rows, y.data(), size_t(c.rows) * 4);
    }
    expect_rows_match(alone, c.rows, seed, batch, m);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernel, LinearBatchInvariance, ::testing::ValuesIn(kernels_of(Op::linear)),
                         kernel_test_name);

// ---- MoE ----------------------------------------------------------------------

using MoeLayer = test::RandomMoeLayer;

// E experts of `expert_fmt` (top-K), a shared expert of `shared_fmt`; with
// `hash`, routing by a random tid2eid table over kTokens token ids whose
// rows may name an expert twice.
MoeLayer moe_layer(Format expert_fmt, Format shared_fmt, int64_t D, int64_t I, int64_t E, int64_t K, bool hash,
                   uint64_t seed) {
  MoeLayer l = test::random_moe_layer(expert_fmt, shared_fmt, D, I, E, K, seed);
  if (hash) {
    // Each token id's K experts from a permutation of E, with the last one
    // sometimes repeating the first (a token twice in one expert's group).
    l.tid2eid.resize(size_t(kTokens * K));
    for (int64_t t = 0; t < kTokens; ++t) {
      const std::vector<int32_t> p = permutation(E, seed + 77 + uint64_t(t));
      for (int64_t j = 0; j < K; ++j) l.tid2eid[size_t(t * K + j)] = p[size_t(j)];
      if (t % 3 == 0) l.tid2eid[size_t(t * K + K - 1)] = p[0];
    }
    l.w.tid2eid = l.tid2eid.data();
    l.w.tid2eid_is_i64 = false;
    l.w.tid2eid_rows = kTokens;
  }
  return l;
}

struct MoeCase {
  Format expert, shared;
  int64_t D, I;
};

// D and I with the tails of the linear cases; the shared expert in another
// format (DeepSeek-V4 mixes MXFP4 experts with an FP8 shared one).
const MoeCase kMoeCases[] = {
    {Format::mxfp4, Format::fp8_block128, 160, 96},
    {Format::nvfp4, Format::nvfp4, 144, 80},
    {Format::fp8_block128, Format::bf16, 200, 136},
    {Format::bf16, Format::mxfp4, 96, 64},
    {Format::f32, Format::f32, 40, 24},
};

class MoeBatchInvariance : public ::testing::TestWithParam<size_t> {};

TEST_P(MoeBatchInvariance, TokenRowsEqualTheTokenAlone) {
  const KernelDesc& k = kernel_registry()[GetParam()];
  if (std::string why = k.unsupported(host()); !why.empty()) GTEST_SKIP() << why;
  // An expert's path there depends on how many tokens chose it.
  if (k.batch_variant) GTEST_SKIP() << k.name << " is not batch invariant: " << k.batch_variant;
  uint64_t seed = 1;
  for (const MoeCase& c : kMoeCases)
    for (bool hash : {false, true}) {
      seed += 7919;
      bool listed = false;
      for (Format f : k.formats) listed |= f == c.expert;
      if (!listed) continue;
      SCOPED_TRACE(std::string(k.name) + " experts " + format_name(c.expert) + " + shared " + format_name(c.shared) +
                   " D=" + std::to_string(c.D) + " I=" + std::to_string(c.I) +
                   (hash ? " hash routing" : " top-k routing"));
      // 8 experts, top-3: 70 tokens put ~26 in each, so every batch above a
      // few tokens shares experts, in groups that change with the draw.
      const MoeLayer l = moe_layer(c.expert, c.shared, c.D, c.I, 8, 3, hash, seed);
      std::vector<float> x(size_t(kTokens * c.D));
      random_normal(x.data(), int64_t(x.size()), seed + 1);
      std::vector<float> alone(size_t(kTokens * c.D));
      for (int32_t t = 0; t < int32_t(kTokens); ++t)
        k.moe(l.w, x.data() + t * c.D, &t, 1, alone.data() + t * c.D, nullptr);
      expect_rows_match(alone, c.D, seed, [&](const std::vector<int32_t>& tokens, int64_t n, float* y, ThreadPool* pool) {
        std::vector<float> xb(size_t(n * c.D));
        for (int64_t j = 0; j < n; ++j)
          std::memcpy(xb.data() + j * c.D, x.data() + int64_t(tokens[size_t(j)]) * c.D, size_t(c.D) * 4);
        k.moe(l.w, xb.data(), tokens.data(), n, y, pool);
      });
    }
}

INSTANTIATE_TEST_SUITE_P(Kernel, MoeBatchInvariance, ::testing::ValuesIn(kernels_of(Op::moe)), kernel_test_name);

// ---- kernel choice ------------------------------------------------------------

// The planner picks one kernel per op and format for a plan (PlanOptions::
// batch); if its choice changed with the batch, a batched step and a single
// one would run different kernels and differ. Guard: on the CPU devices,
// the default choice is the same for every batch the engine may step with.
TEST(PlannerBatchInvariance, DefaultKernelDoesNotDependOnTheBatch) {
  for (const std::string dev : {"host", "cpu-avx2", "cpu-avx512"}) {
    const Device d = dev == "host" ? host() : named_device(dev, 2, 10.0);
    for (Op op : {Op::linear, Op::moe})
      for (Format f : {Format::mxfp4, Format::nvfp4, Format::fp8_block128, Format::bf16, Format::f32}) {
        SCOPED_TRACE(dev + " " + op_name(op) + " " + format_name(f));
        std::string first;
        for (int64_t batch : {1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 70, 128, 512}) {
          OpShape shape;
          shape.op = op;
          shape.format = f;
          shape.rows = shape.cols = 4096;
          shape.batch = batch;
          shape.bytes = 4096.0 * 4096.0;
          shape.flops = 2.0 * 4096.0 * 4096.0 * double(batch);
          const Selection sel = select_kernel(kernel_registry(), shape, d);
          ASSERT_NE(sel.chosen, nullptr);
          if (first.empty()) first = sel.chosen->name;
          EXPECT_EQ(sel.chosen->name, first) << "batch " << batch << ": " << sel.why;
        }
      }
  }
}

}  // namespace
}  // namespace nibble
