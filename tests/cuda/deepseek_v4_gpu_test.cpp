// Whole DeepSeek-V4 models on the GPU (--device cuda) against the same
// models on the CPU: the fixtures' logits, incremental against full
// forwards, a sequence in a batch against the sequence alone, and the
// shipped model's greedy text. Skipped, saying why, without a CUDA device.
//
// The bound. The CPU runs every op in f32; the GPU rounds each matrix op's
// activations to BF16 (unit roundoff u = 2^-9) and accumulates in f32. To
// first order each rounding perturbs the residual by at most u relative, and
// the perturbations add: a token's logits pass through S = 8 roundings per
// layer (wq_a, wq_b, wkv, the indexer's projections, wo_a, wo_b, the
// experts' input, the shared expert's) plus the head's, so
//   |gpu - cpu| <= S * u * max |cpu logits of the row|.
// It is a first-order estimate of the worst case, not a proof (the
// hyper-connections' Sinkhorn and the top-k selections are not linear); the
// tests print the measured error beside it. Argmax must agree wherever the
// CPU's top-2 gap exceeds twice the bound. f32 atomics (split-K) sum in a
// run-dependent order on the GPU, so GPU-against-GPU checks use the same
// bound instead of bit equality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/token_draw.h"
#include "model/cuda_backend.h"
#include "model/deepseek_v4.h"
#include "model/fixture_util.h"
#include "nibble/engine.h"
#include "support/cuda_test.h"
#include "support/source_dir.h"
#include "util/error.h"

namespace nibble {
namespace {

constexpr double kBf16Roundoff = 1.0 / 512;  // 2^-9
constexpr int kRoundingsPerLayer = 8;

std::unique_ptr<Engine> load(const std::string& dir, const std::string& device) {
  EngineOptions o;
  o.device = device;
  o.load_tokenizer = false;
  o.threads = 2;
  return Engine::load(dir, o);
}

int64_t layers_of(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  return nlohmann::json::parse(f).at("num_hidden_layers").get<int64_t>();
}

double bound_fraction(const std::string& dir) {
  return double(kRoundingsPerLayer * layers_of(dir) + 1) * kBf16Roundoff;
}

size_t first_max(const float* v, int64_t n) { return size_t(std::max_element(v, v + n) - v); }

// The two largest values' difference.
double top2_gap(const float* v, int64_t n) {
  std::vector<float> s(v, v + n);
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return double(s[0]) - double(s[1]);
}

// Rows of `got` [rows][V] against `want` within `fraction` of each row's
// largest |want|; argmax equal where want's top-2 gap exceeds twice that.
// Returns the largest error as a fraction of the row's scale.
double expect_rows_close(const std::vector<float>& want, const std::vector<float>& got, int64_t V, double fraction,
                         const std::string& what) {
  EXPECT_EQ(want.size(), got.size()) << what;
  double worst = 0;
  for (size_t r = 0; r * size_t(V) < std::min(want.size(), got.size()); ++r) {
    const float* w = want.data() + r * size_t(V);
    const float* g = got.data() + r * size_t(V);
    double scale = 0, err = 0;
    for (int64_t v = 0; v < V; ++v) {
      scale = std::max(scale, std::fabs(double(w[v])));
      err = std::max(err, std::fabs(double(w[v]) - double(g[v])));
    }
    const double tol = fraction * std::max(scale, 1e-6);
    worst = std::max(worst, err / std::max(scale, 1e-6));
    EXPECT_LE(err, tol) << what << ", row " << r << ": max |gpu - cpu| " << err << " over a bound of " << tol;
    if (top2_gap(w, V) > 2 * tol) {
      EXPECT_EQ(first_max(w, V), first_max(g, V)) << what << ", row " << r;
    }
  }
  return worst;
}

// Every row's logits of `tokens` fed at once (all_logits).
std::vector<float> full_forward(Engine& e, const std::vector<int32_t>& tokens) {
  const SeqId s = e.create();
  StepInput in{s, tokens, true};
  std::vector<float> out = e.step(std::span<const StepInput>(&in, 1)).at(0);
  e.release(s);
  return out;
}

// The fixtures whose experts the GPU's MoE kernel takes (MXFP4, NVFP4).
const std::vector<std::string> kGpuFixtures = {"flash_tiny_stock", "flash_tiny_nvfp4"};

TEST(DeepseekV4Gpu, FixtureLogitsMatchTheCpu) {
  REQUIRE_CUDA_DEVICE();
  for (const std::string& name : kGpuFixtures) {
    const std::string dir = test::fixture_dir(name);
    auto cpu = load(dir, "host"), gpu = load(dir, "cuda");
    const test::Expected ex = test::load_expected(name);
    const double f = bound_fraction(dir);
    double worst = 0;
    for (size_t i = 0; i < ex.sequences.size(); ++i) {
      const auto& toks = ex.sequences[i].tokens;
      worst = std::max(worst, expect_rows_close(full_forward(*cpu, toks), full_forward(*gpu, toks), ex.vocab, f,
                                                name + " sequence " + std::to_string(i)));
    }
    std::printf("[ gpu vs cpu ] %s: largest |gpu - cpu| %.3g of the row's max |logit|, bound %.3g\n", name.c_str(),
                worst, f);
  }
}

TEST(DeepseekV4Gpu, IncrementalMatchesFullForward) {
  REQUIRE_CUDA_DEVICE();
  for (const std::string& name : kGpuFixtures) {
    const std::string dir = test::fixture_dir(name);
    auto gpu = load(dir, "cuda");
    const test::Expected ex = test::load_expected(name);
    const auto& toks = ex.sequences.back().tokens;
    const std::vector<float> full = full_forward(*gpu, toks);
    // Token by token, then the rest in chunks of 3: every cache path (the
    // window ring, compressor windows closing mid-chunk) on the device.
    const SeqId s = gpu->create();
    std::vector<float> inc;
    for (size_t t = 0; t < toks.size();) {
      const size_t n = t < 8 ? 1 : std::min<size_t>(3, toks.size() - t);
      StepInput in{s, std::span<const int32_t>(toks.data() + t, n), true};
      const std::vector<float> rows = gpu->step(std::span<const StepInput>(&in, 1)).at(0);
      inc.insert(inc.end(), rows.begin(), rows.end());
      t += n;
    }
    expect_rows_close(full, inc, ex.vocab, bound_fraction(dir), name + " incremental");
  }
}

TEST(DeepseekV4Gpu, SequenceInABatchMatchesItAlone) {
  REQUIRE_CUDA_DEVICE();
  const std::string name = "flash_tiny_stock";
  const std::string dir = test::fixture_dir(name);
  auto gpu = load(dir, "cuda");
  const test::Expected ex = test::load_expected(name);
  ASSERT_GE(ex.sequences.size(), 2u);
  std::vector<std::vector<float>> alone;
  for (const auto& s : ex.sequences) alone.push_back(full_forward(*gpu, s.tokens));
  std::vector<SeqId> ids;
  std::vector<StepInput> batch;
  for (const auto& s : ex.sequences) {
    ids.push_back(gpu->create());
    batch.push_back(StepInput{ids.back(), s.tokens, true});
  }
  const auto together = gpu->step(batch);
  for (size_t i = 0; i < ex.sequences.size(); ++i)
    expect_rows_close(alone[i], together[i], ex.vocab, bound_fraction(dir),
                      "sequence " + std::to_string(i) + " in a batch");
}

TEST(DeepseekV4Gpu, ForkAndTruncateMatchAFreshSequence) {
  REQUIRE_CUDA_DEVICE();
  const std::string name = "flash_tiny_stock";
  const std::string dir = test::fixture_dir(name);
  auto gpu = load(dir, "cuda");
  const test::Expected ex = test::load_expected(name);
  const auto& toks = ex.sequences.back().tokens;
  ASSERT_GE(toks.size(), 12u);
  const std::vector<float> full = full_forward(*gpu, toks);
  const size_t V = size_t(ex.vocab), cut = toks.size() - 5;
  // Feed all, fork, truncate the fork back by 5 and feed the same 5 again:
  // its last rows must be the full forward's.
  const SeqId s = gpu->create();
  StepInput in{s, toks, false};
  gpu->step(std::span<const StepInput>(&in, 1));
  const SeqId f = gpu->fork(s);
  gpu->truncate(f, int64_t(cut));
  StepInput again{f, std::span<const int32_t>(toks.data() + cut, toks.size() - cut), true};
  const std::vector<float> tail = gpu->step(std::span<const StepInput>(&again, 1)).at(0);
  expect_rows_close(std::vector<float>(full.begin() + std::ptrdiff_t(cut * V), full.end()), tail, ex.vocab,
                    bound_fraction(dir), "forked, truncated and refed");
}

TEST(DeepseekV4Gpu, TokensDrawnOnTheGpuFollowItsLogits) {
  REQUIRE_CUDA_DEVICE();
  // One step, one prompt twice: one copy's logits come back, the other's
  // token is drawn on the GPU (kernels/cuda/sampling.h) greedily and at a
  // temperature with a fixed u. Two rows of one step differ only by the
  // order of f32 atomics (a few ulps), so the drawn ids are the host rule's
  // on the returned logits unless that rule sits on a boundary.
  const std::string dir = test::fixture_dir("flash_tiny_stock");
  LoadOptions lo;
  lo.device = "cuda";
  lo.bandwidth_gbps = 1;
  auto m = load_model(dir, lo);
  const int64_t V = m->vocab_size();
  const std::vector<int32_t> prompt = test::load_expected("flash_tiny_stock").sequences.back().tokens;
  for (float temperature : {0.0f, 0.8f}) {
    DrawParams p;
    p.temperature = temperature;
    p.top_k = 50;
    p.u = 0.37;
    auto a = m->new_state(), b = m->new_state();
    std::vector<float> logits(static_cast<size_t>(V));
    int32_t id = -1;
    SeqStep s[2];
    s[0].state = a.get();
    s[0].tokens = prompt;
    s[0].logits = logits.data();
    s[1].state = b.get();
    s[1].tokens = prompt;
    s[1].draw = &p;
    s[1].drawn = &id;
    m->step(s);
    if (temperature == 0 && top2_gap(logits.data(), V) < 1e-4) continue;  // a near tie: either is right
    EXPECT_EQ(id, draw_token(logits.data(), V, p)) << "temperature " << temperature;
  }
}

TEST(DeepseekV4Gpu, ExpertsWithoutAGpuKernelAreRefusedAtLoad) {
  REQUIRE_CUDA_DEVICE();
  // hf_tiny_fp8experts stores its routed experts in FP8: no GPU MoE kernel
  // takes them, so the load (not the first step) says so.
  try {
    load(test::fixture_dir("hf_tiny_fp8experts"), "cuda");
    FAIL() << "an FP8-expert model loaded on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MoE kernel can run"), std::string::npos) << e.what();
  }
}

TEST(DeepseekV4Gpu, ShippedModelGreedyTextMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  const std::string dir = test::source_dir() + "/models/dsv4-tiny";
  EngineOptions o;
  o.threads = 2;
  auto cpu = Engine::load(dir, o);
  o.device = "cuda";
  auto gpu = Engine::load(dir, o);
  const std::vector<int32_t> prompt = cpu->tokenize("ROMEO:\nBut soft, what light", false);
  const double f = bound_fraction(dir);
  GenerationParams p;
  p.max_new_tokens = 48;
  p.use_model_eos = false;
  p.sampling.temperature = 0;
  // The CPU's margins: the GPU must follow while every top-2 gap so far
  // exceeds twice the bound (after a near tie the texts may part).
  std::vector<double> gap, tol;
  p.observe = [&](const float* logits, int64_t V, int32_t) {
    double scale = 0;
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(double(logits[v])));
    gap.push_back(top2_gap(logits, V));
    tol.push_back(f * scale);
  };
  const SeqId a = cpu->create();
  const GenerationResult want = cpu->generate(a, prompt, p);
  p.observe = nullptr;
  const SeqId b = gpu->create();
  const GenerationResult got = gpu->generate(b, prompt, p);
  size_t checked = 0;
  for (size_t i = 0; i < want.tokens.size() && i < got.tokens.size() && gap[i] > 2 * tol[i]; ++i, ++checked)
    EXPECT_EQ(want.tokens[i], got.tokens[i]) << "token " << i << ": " << cpu->detokenize(want.tokens) << " | "
                                             << gpu->detokenize(got.tokens);
  std::printf("[ gpu vs cpu ] shipped model: %zu of %zu greedy tokens compared (before the first near tie); "
              "cpu: %s | gpu: %s\n",
              checked, want.tokens.size(), cpu->detokenize(want.tokens).c_str(),
              gpu->detokenize(got.tokens).c_str());
  EXPECT_GT(checked, 0u) << "the first token is already a near tie: pick another prompt";
}

// Decode steps captured as CUDA graphs (model/cuda_step_graph.h) against
// the same steps launched kernel by kernel: two sequences at different
// points of their compressors' windows (their pooling steps differ), a fork
// in the middle of the decode, then one sequence alone (another key). Every
// step's logits within the GPU-against-GPU bound (f32 atomics), and the
// graphs really ran: launched for every decode step, updated more often
// than instantiated.
TEST(DeepseekV4Gpu, DecodeStepsAsGraphsMatchEagerSteps) {
  REQUIRE_CUDA_DEVICE();
  const std::string name = "flash_tiny_stock";
  const std::string dir = test::fixture_dir(name);
  auto load_with = [&](bool graphs) {
    LoadOptions lo;
    lo.device = "cuda";
    lo.bandwidth_gbps = 1;
    lo.cuda_graphs = graphs;
    return load_model(dir, lo);
  };
  auto graphed = load_with(true), eager = load_with(false);
  const int64_t V = graphed->vocab_size();
  const std::vector<int32_t> prompt = test::load_expected(name).sequences.back().tokens;
  ASSERT_GE(prompt.size(), 6u);
  const std::vector<int32_t> prompt_b(prompt.begin(), prompt.end() - 3);

  // The same schedule on both models; every step's logits, in order.
  auto run = [&](const Model& m) {
    std::vector<std::vector<float>> out;
    std::vector<std::unique_ptr<ModelState>> seqs;
    seqs.push_back(m.new_state());
    seqs.push_back(m.new_state());
    auto step = [&](std::vector<std::vector<int32_t>> tokens) {
      std::vector<SeqStep> batch(tokens.size());
      std::vector<std::vector<float>> logits(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) {
        logits[i].resize(size_t(V) * tokens[i].size());
        batch[i].state = seqs[i].get();
        batch[i].tokens = tokens[i];
        batch[i].logits = logits[i].data();
        batch[i].rows = LogitRows::all;
      }
      m.step(batch);
      for (auto& l : logits) out.push_back(std::move(l));
    };
    step({prompt, prompt_b});  // prefill: eager on both
    for (int t = 0; t < 24; ++t) {
      if (t == 12) seqs.push_back(m.fork(*seqs[0]));
      std::vector<std::vector<int32_t>> tokens;
      for (size_t i = 0; i < seqs.size(); ++i) tokens.push_back({int32_t((7 * t + 3 * int(i) + 1) % V)});
      step(tokens);
    }
    seqs.resize(1);
    for (int t = 0; t < 9; ++t) step({{int32_t((5 * t + 2) % V)}});
    return out;
  };
  const auto want = run(*eager), got = run(*graphed);
  ASSERT_EQ(want.size(), got.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, expect_rows_close(want[i], got[i], V, bound_fraction(dir), "output " + std::to_string(i)));

  auto stats_of = [](const Model& m) {
    const auto* b = dynamic_cast<const CudaBackend*>(&dynamic_cast<const DeepseekV4Model&>(m).backend());
    EXPECT_NE(b, nullptr);
    return b ? b->graph_stats() : StepGraphStats{};
  };
  const StepGraphStats g = stats_of(*graphed), e = stats_of(*eager);
  std::printf("[ graphs ] %s: %lld launches, %lld instantiations, %lld updates, %lld refused, %lld early ends, "
              "%lld nodes in the last; largest |graph - eager| %.3g of the row's max |logit|\n",
              name.c_str(), (long long)g.launches, (long long)g.instantiations, (long long)g.updates,
              (long long)g.refused_updates, (long long)g.early_ends, (long long)g.nodes, worst);
  EXPECT_EQ(e.launches, 0);
  EXPECT_GE(g.launches, 24 + 9);  // every decode step (and any part ended early)
  // Instantiations: one per key (batches of 2, 3 and 1), and one per
  // capture ended early (the arena's first steps, entry buffers doubling).
  EXPECT_GT(g.updates, g.instantiations);
  EXPECT_GT(g.nodes, 10);
}

TEST(DeepseekV4Gpu, CpuOnlyModelsSayWhy) {
  REQUIRE_CUDA_DEVICE();
  // gpt-oss runs on the CPU backend only.
  try {
    load(test::source_dir() + "/tests/fixtures/gptoss/tiny_a", "cuda");
    FAIL() << "gpt-oss loaded on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on this machine's CPU only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble
