// DeepSeek-V3 (DeepseekV3ForCausalLM: DeepSeek-V3 / R1, Kimi K2) against
// transformers: the fixtures of tools/gen_dsv3_fixtures.py are tiny random
// models in the published layouts (BF16; FP8 block-128 with F32
// weight_scale_inv; Kimi K2's compressed-tensors INT4 routed experts) with
// transformers' fp32 logits computed from the dequantized stored weights.
// Also: incremental decode == full forward, a sequence in a mixed batch ==
// alone (bitwise), truncate / fork, the absorbed latent attention against the
// unabsorbed formula, group-limited routing against a direct transcription of
// transformers' router, and the errors of bad configs and checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/detect.h"
#include "device/device.h"
#include "fixture_util.h"
#include "kernels/moe_routing.h"
#include "kernels/registry.h"
#include "model/deepseek_v3.h"
#include "model/deepseek_v3_attention.h"
#include "support/batch_invariance.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"
#include "util/error.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

// Rounding between nibble and the oracle, both f32 (the stored values are
// exact in f32 on both sides; only the order of the sums differs, and the
// absorbed attention reassociates q_nope.(W_UK c) as (W_UK^T q_nope).c and
// sum_j p_j W_UV c_j as W_UV sum_j p_j c_j). A logit ends a chain of ~8 dot
// products per layer (q_a, q_b, kv_a, absorption, scores, ctx, W_UV, o, the
// MLP / experts) of length K <= 96, each off by ~sqrt(K) * 2^-24 = 6e-7
// relative at worst; 3 layers and the head give ~2e-5 if every error lined
// up: that is the bound here (observed: ~1e-6), inside the 1e-4 of
// the largest logit. A real mistake (a wrong softmax scale or mscale, a group
// mask off, the bias used in the weights, a rope half wrong, the shared
// expert dropped) moves logits by >= 1e-2 relative.
constexpr double kRelTol = 2e-5;

const std::vector<std::string>& dsv3_fixtures() {
  static const std::vector<std::string> names = {"tiny_bf16", "tiny_fp8", "kimi_int4"};
  return names;
}

std::string ddir(const std::string& name) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/dsv3/" + name; }

struct Seqs {
  int64_t vocab = 0;
  nlohmann::json manifest;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // [n][V]
};

Seqs load_dsv3_expected(const std::string& name) {
  std::ifstream mf(ddir(name) + "/expected/manifest.json");
  Seqs s;
  s.manifest = nlohmann::json::parse(mf);
  s.vocab = s.manifest.at("vocab_size").get<int64_t>();
  for (const auto& e : s.manifest.at("sequences")) {
    std::vector<int32_t> t = e.at("tokens").get<std::vector<int32_t>>();
    std::vector<float> l(t.size() * size_t(s.vocab));
    std::ifstream lf(ddir(name) + "/expected/" + e.at("logits").get<std::string>(), std::ios::binary);
    lf.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * 4));
    if (!lf) throw std::runtime_error("short logits file for " + name);
    s.tokens.push_back(std::move(t));
    s.logits.push_back(std::move(l));
  }
  return s;
}

// Every MoE kernel name the host runs on experts of `format` (linear kernels share the names),
// but those that are not batch invariant by design (registry.h: batch_variant).
std::vector<std::string> runnable_kernels(Format format) {
  const Device host = host_cpu_device(2, 10.0);
  std::vector<std::string> names;
  for (const KernelDesc& k : kernel_registry())
    if (k.op == Op::moe && k.unsupported(host).empty() && !k.batch_variant &&
        std::find(k.formats.begin(), k.formats.end(), format) != k.formats.end())
      names.push_back(k.name);
  return names;
}

Format expert_format(const std::string& fixture) {
  return fixture == "tiny_fp8" ? Format::fp8_block128 : fixture == "kimi_int4" ? Format::int4 : Format::bf16;
}

class Dsv3Hf : public ::testing::TestWithParam<std::string> {};

TEST_P(Dsv3Hf, DetectionReadsThePublishedLayout) {
  const std::string name = GetParam();
  auto ck = Checkpoint::open(ddir(name));
  Detection det = detect_formats(*ck);
  EXPECT_TRUE(det.unsupported.empty());
  EXPECT_TRUE(det.warnings.empty()) << (det.warnings.empty() ? "" : det.warnings[0]);
  const Format want = expert_format(name);
  int experts = 0, fp8 = 0;
  for (const DetectedTensor& t : det.tensors) {
    if (t.format == Format::fp8_block128) {
      ++fp8;
      ASSERT_EQ(t.parts.size(), 2u);
      EXPECT_EQ(t.parts[1]->name, t.name + ".weight_scale_inv");
      EXPECT_EQ(t.parts[1]->dtype, DType::F32);
    }
    if (t.name.find(".mlp.experts.") == std::string::npos) {
      if (t.is_matrix && t.name.find("self_attn") != std::string::npos) {
        EXPECT_EQ(t.format, name == "tiny_fp8" ? Format::fp8_block128 : Format::bf16) << t.name;
      }
      continue;
    }
    ++experts;
    EXPECT_EQ(t.format, want) << t.name;
    if (want == Format::int4) {
      ASSERT_EQ(t.parts.size(), 3u);
      EXPECT_EQ(t.parts[0]->name, t.name + ".weight_packed");
      EXPECT_EQ(t.cols / t.parts[1]->shape[1], 32) << t.name;
    }
  }
  EXPECT_GT(experts, 0);
  EXPECT_EQ(fp8 > 0, name == "tiny_fp8");
}

TEST_P(Dsv3Hf, ConfigMatchesTransformers) {
  const std::string name = GetParam();
  Seqs exp = load_dsv3_expected(name);
  auto ck = Checkpoint::open(ddir(name));
  const DeepseekV3Config c = parse_deepseek_v3_config(ck->config(), ck->file_path("config.json"));
  // transformers' DeepseekV3Attention.scaling and rotary_emb.attention_scaling,
  // recorded by the generator: yarn's mscale arithmetic done by HF.
  EXPECT_NEAR(c.softmax_scale, exp.manifest.at("softmax_scale").get<double>(), 1e-7);
  EXPECT_NEAR(c.rope.attention_factor, exp.manifest.at("attention_factor").get<double>(), 1e-7);
  EXPECT_EQ(c.q_lora_rank == 0, name == "tiny_fp8");  // q_lora_rank null there
  EXPECT_EQ(c.model_type, name == "kimi_int4" ? "kimi_k2" : "deepseek_v3");
}

TEST_P(Dsv3Hf, FullForwardMatchesTransformers) {
  const std::string name = GetParam();
  Seqs exp = load_dsv3_expected(name);
  for (const std::string& kernel : {std::string("cpu_ref"), std::string("auto")}) {
    SCOPED_TRACE(kernel);
    auto model = load_model(ddir(name), test::test_load_options(kernel));
    ASSERT_EQ(model->architecture(), "DeepseekV3ForCausalLM");
    ASSERT_EQ(model->vocab_size(), exp.vocab);
    for (size_t i = 0; i < exp.tokens.size(); ++i)
      test::expect_sequence_matches(*model, exp.tokens[i], exp.logits[i].data(), exp.vocab, kRelTol,
                                    name + " " + kernel, i);
  }
}

// Token by token (and in odd chunks) gives the full forward's logits bit for
// bit: the latent caches hold exactly what later tokens read.
TEST_P(Dsv3Hf, IncrementalEqualsFullForward) {
  const std::string name = GetParam();
  Seqs exp = load_dsv3_expected(name);
  auto model = load_model(ddir(name), test::test_load_options("auto"));
  const auto& toks = exp.tokens[0];
  const int64_t n = int64_t(toks.size()), V = exp.vocab;
  std::vector<float> full(size_t(n * V));
  auto a = model->new_state();
  model->forward(*a, toks, full.data(), true);
  for (int64_t chunk : {1, 3, 7}) {
    auto b = model->new_state();
    std::vector<float> inc(size_t(n * V));
    for (int64_t p = 0; p < n; p += chunk) {
      const int64_t c = std::min(chunk, n - p);
      model->forward(*b, std::span<const int32_t>(toks.data() + p, size_t(c)), inc.data() + p * V, true);
    }
    EXPECT_EQ(std::memcmp(inc.data(), full.data(), full.size() * 4), 0) << "chunks of " << chunk;
  }
  // The cache holds the latent and the rope key only: (C + r) floats per
  // token per layer; besides it the state keeps the token ids (4 bytes per
  // token). A vector's capacity is at most twice its size.
  const DeepseekV3Config& c = static_cast<const DeepseekV3Model&>(*model).config();
  EXPECT_LE(a->memory_bytes(), sizeof(DeepseekV3State) + uint64_t(c.n_layers) * 2 * uint64_t(n) *
                                                             uint64_t(c.kv_lora_rank + c.qk_rope) * 4 +
                                   2 * uint64_t(n) * sizeof(int32_t));
}

// Mixed batches at random chunkings, every runnable kernel: each sequence's
// logits equal it fed alone, bitwise.
TEST_P(Dsv3Hf, BatchedEqualsAloneBitwise) {
  const std::string name = GetParam();
  Seqs exp = load_dsv3_expected(name);
  const std::vector<std::string> kernels = runnable_kernels(expert_format(name));
  EXPECT_FALSE(kernels.empty());
  for (const std::string& kernel : kernels) {
    SCOPED_TRACE(kernel);
    LoadOptions opt = test::test_load_options(kernel);
    opt.max_chunk_tokens = 11;
    auto m = load_model(ddir(name), opt);
    std::vector<std::vector<int32_t>> seqs = exp.tokens;
    seqs.push_back(std::vector<int32_t>(exp.tokens[0].rbegin(), exp.tokens[0].rend()));
    test::expect_random_batches_equal_alone(*m, seqs);
  }
}

// Truncate then refeed equals never fed; a fork evolves independently of its origin.
TEST_P(Dsv3Hf, TruncateAndFork) {
  const std::string name = GetParam();
  Seqs exp = load_dsv3_expected(name);
  auto m = load_model(ddir(name), test::test_load_options("auto"));
  const auto& a = exp.tokens[0];
  const auto& b = exp.tokens[1];
  const int64_t n = int64_t(a.size()), V = m->vocab_size();
  std::vector<float> ref(size_t(n * V));
  auto r = m->new_state();
  m->forward(*r, a, ref.data(), true);
  for (int64_t p : {int64_t(0), int64_t(1), n / 2, n - 1}) {
    SCOPED_TRACE("position " + std::to_string(p));
    auto st = m->new_state();
    m->forward(*st, a, nullptr, false);
    m->truncate(*st, p);
    EXPECT_EQ(st->position(), p);
    m->forward(*st, std::span<const int32_t>(b.data(), std::min<size_t>(b.size(), 9)), nullptr, false);
    m->truncate(*st, p);
    std::vector<float> got(size_t((n - p) * V));
    m->forward(*st, std::span<const int32_t>(a.data() + p, size_t(n - p)), got.data(), true);
    EXPECT_EQ(std::memcmp(got.data(), ref.data() + p * V, got.size() * 4), 0);
  }
  const int64_t p = n / 2;
  auto origin = m->new_state();
  m->forward(*origin, std::span<const int32_t>(a.data(), size_t(p)), nullptr, false);
  auto fork = m->fork(*origin);
  EXPECT_EQ(fork->position(), p);
  std::vector<int32_t> ab(a.begin(), a.begin() + p);
  ab.insert(ab.end(), b.begin(), b.end());
  std::vector<float> ab_ref(ab.size() * size_t(V));
  auto s2 = m->new_state();
  m->forward(*s2, ab, ab_ref.data(), true);
  std::vector<float> fork_got(b.size() * size_t(V)), origin_got(size_t((n - p) * V));
  m->forward(*fork, b, fork_got.data(), true);
  m->forward(*origin, std::span<const int32_t>(a.data() + p, size_t(n - p)), origin_got.data(), true);
  EXPECT_EQ(std::memcmp(fork_got.data(), ab_ref.data() + p * V, fork_got.size() * 4), 0);
  EXPECT_EQ(std::memcmp(origin_got.data(), ref.data() + p * V, origin_got.size() * 4), 0);
  EXPECT_THROW(m->truncate(*origin, n + 1), Error);
}

// `nibble run --tokens` on a checkpoint without a tokenizer: greedy ids
// equal transformers' argmax path (recorded by the generator with a top-2
// gap above 1e-3 of the largest logit at every step).
TEST_P(Dsv3Hf, RunTokensPrintsTransformersGreedyPath) {
  const nlohmann::json g = load_dsv3_expected(GetParam()).manifest.at("greedy");
  std::string prompt, want;
  for (const auto& t : g.at("prompt")) prompt += (prompt.empty() ? "" : ",") + std::to_string(t.get<int>());
  for (const auto& t : g.at("continuation")) want += (want.empty() ? "" : ",") + std::to_string(t.get<int>());
  const size_t n = g.at("continuation").size();
  test::RunResult r = test::run_nibble({"run", ddir(GetParam()), "--tokens", prompt, "-n", std::to_string(n), "--temp",
                                        "0", "--moe-backend", "cpu_ref", "--linear-backend", "cpu_ref"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n") << r.err;
  test::RunResult text = test::run_nibble({"run", ddir(GetParam()), "-p", "hello"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("no tokenizer.json"), std::string::npos) << text.err;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Dsv3Hf, ::testing::ValuesIn(dsv3_fixtures()));

// The MTP layer (the draft of speculative decoding) has its own tests:
// dsv3_mtp_test.cpp.

// ---- the absorbed latent attention against the formula transformers runs ----

// Unabsorbed, in f64: k_nope = W_UK c, v = W_UV c per head, softmax over
// q.k * scale, o = sum p v. mla_attend_cpu absorbs W_UK into the query and
// W_UV after the weighted sum; the two agree up to f32 rounding: each output
// is a sum over T * C products of O(1) values computed in f32 in another
// order, ~sqrt(T * C) * 2^-24 * |o| ~ 1e-5 relative here; 1e-4 is the bound.
TEST(Dsv3Mla, AbsorbedEqualsUnabsorbed) {
  const MlaShape s{3, 12, 8, 10, 24, 0.29f};
  const int64_t H = s.heads, N = s.nope, R = s.rope, Vd = s.v, C = s.latent, qw = s.q_width();
  const int64_t T = 13;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n, float sc) {
    v.resize(n);
    for (float& x : v) x = nd(rng) * sc;
  };
  std::vector<float> kv_b, q, lat, kr;
  fill(kv_b, size_t(H * (N + Vd) * C), 1.0f / std::sqrt(float(C)));
  fill(q, size_t(T * H * qw), 1.0f);
  fill(lat, size_t(T * C), 1.0f);
  fill(kr, size_t(T * R), 1.0f);
  // Fed in two steps (7 then 6 tokens) to cover a cache that already holds rows.
  HostMlaCache cache(s);
  std::vector<float> o(size_t(T * H * Vd));
  for (auto [p0, cnt] : {std::pair<int64_t, int64_t>{0, 7}, {7, 6}}) {
    const MlaSeq seq{&cache, cnt, p0};
    mla_attend_cpu(s, kv_b.data(), seq, q.data() + p0 * H * qw, lat.data() + p0 * C, kr.data() + p0 * R,
                   o.data() + p0 * H * Vd, nullptr);
  }
  EXPECT_EQ(cache.cache.rows(C), T);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + t * H * qw + h * qw;
      std::vector<double> sc(size_t(t + 1));
      double m = -1e300;
      for (int64_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < N; ++i) {
          double k = 0;
          for (int64_t c = 0; c < C; ++c) k += double(kv_b[size_t((h * (N + Vd) + i) * C + c)]) * lat[size_t(j * C + c)];
          d += double(qh[i]) * k;
        }
        for (int64_t i = 0; i < R; ++i) d += double(qh[N + i]) * kr[size_t(j * R + i)];
        sc[size_t(j)] = d * double(s.scale);
        m = std::max(m, sc[size_t(j)]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - m));
      double scale = 0, err = 0;
      std::vector<double> ref(size_t(Vd), 0.0);
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t i = 0; i < Vd; ++i) {
          double v = 0;
          for (int64_t c = 0; c < C; ++c) v += double(kv_b[size_t((h * (N + Vd) + N + i) * C + c)]) * lat[size_t(j * C + c)];
          ref[size_t(i)] += sc[size_t(j)] / sum * v;
        }
      for (int64_t i = 0; i < Vd; ++i) {
        scale = std::max(scale, std::fabs(ref[size_t(i)]));
        err = std::max(err, std::fabs(ref[size_t(i)] - o[size_t(t * H * Vd + h * Vd + i)]));
      }
      worst = std::max(worst, err / scale);
    }
  std::printf("absorbed vs unabsorbed MLA: max rel err %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);
  // A cache at another length than the sequence's position is an error.
  const MlaSeq bad{&cache, 1, 3};
  EXPECT_THROW(mla_attend_cpu(s, kv_b.data(), bad, q.data(), lat.data(), kr.data(), o.data(), nullptr), Error);
}

// ---- group-limited routing (noaux_tc) against transformers' router ----

// A direct transcription of DeepseekV3TopkRouter.forward in f32 with
// std::sort (the values matter, not torch's tie order: the random keys have
// no ties): sigmoid, + bias, group score = top-2 sum, keep topk_group groups,
// top-k of the kept, weights = sigmoid at the chosen, normalised, scaled.
TEST(Dsv3Routing, GroupLimitedTopKMatchesTranscription) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto [E, G, TG, K, norm] : {std::tuple<int, int, int, int, bool>{8, 4, 2, 3, true}, {16, 4, 1, 4, false},
                                   {12, 1, 1, 4, true}, {32, 8, 4, 8, true}}) {
    SCOPED_TRACE("E " + std::to_string(E) + " groups " + std::to_string(G) + "/" + std::to_string(TG));
    MoeWeights w;
    w.n_experts = E;
    w.top_k = K;
    w.n_group = G;
    w.topk_group = TG;
    w.scoring = ScoringFunc::sigmoid;
    w.norm_topk_prob = norm;
    w.routed_scaling = 2.5f;
    std::vector<float> bias(static_cast<size_t>(E));
    for (float& b : bias) b = 0.3f * nd(rng);
    w.bias = bias.data();
    const int64_t n = 40;
    std::vector<float> logits(size_t(n * E));
    for (float& x : logits) x = 2.0f * nd(rng);
    MoeRouting r;
    route_tokens(w, logits.data(), nullptr, n, &r);
    for (int64_t t = 0; t < n; ++t) {
      const int per = E / G;
      std::vector<float> sc(static_cast<size_t>(E)), key(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) {
        sc[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[size_t(t * E + e)]));
        key[size_t(e)] = sc[size_t(e)] + bias[size_t(e)];
      }
      std::vector<std::pair<float, int>> groups;
      for (int g = 0; g < G; ++g) {
        std::vector<float> v(key.begin() + g * per, key.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        groups.push_back({v[0] + v[1], g});
      }
      std::sort(groups.rbegin(), groups.rend());
      std::vector<std::pair<float, int>> cand;
      for (int i = 0; i < TG; ++i)
        for (int e = groups[size_t(i)].second * per; e < (groups[size_t(i)].second + 1) * per; ++e)
          cand.push_back({key[size_t(e)], e});
      std::sort(cand.rbegin(), cand.rend());
      std::vector<int> want;
      float sum = 0;
      for (int k = 0; k < K; ++k) {
        want.push_back(cand[size_t(k)].second);
        sum += sc[size_t(cand[size_t(k)].second)];
      }
      std::vector<int> got(r.experts.begin() + t * K, r.experts.begin() + (t + 1) * K);
      std::vector<std::pair<int, float>> got_w;
      for (int k = 0; k < K; ++k) got_w.push_back({got[size_t(k)], r.weights[size_t(t * K + k)]});
      std::sort(got_w.begin(), got_w.end());
      std::sort(want.begin(), want.end());
      for (int k = 0; k < K; ++k) {
        ASSERT_EQ(got_w[size_t(k)].first, want[size_t(k)]) << "token " << t;
        const float s = sc[size_t(want[size_t(k)])];
        const float expect = (norm ? s / (sum + 1e-20f) : s) * 2.5f;
        EXPECT_NEAR(got_w[size_t(k)].second, expect, 1e-6f * 2.5f) << "token " << t;
      }
    }
  }
}

// ---- config and checkpoint errors name the field / tensor ----

std::string config_error(const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream f(ddir("tiny_bf16") + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(f);
  edit(cfg);
  try {
    parse_deepseek_v3_config(cfg, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dsv3Config, BadFieldsAreNamed) {
  EXPECT_EQ(config_error([](auto&) {}), "");
  EXPECT_EQ(config_error([](auto& c) { c["model_type"] = "kimi_k2"; }), "");
  std::string e = config_error([](auto& c) { c["model_type"] = "deepseek_v2"; });
  EXPECT_NE(e.find("model_type"), std::string::npos) << e;
  e = config_error([](auto& c) { c["rope_interleave"] = false; });
  EXPECT_NE(e.find("rope_interleave"), std::string::npos) << e;
  e = config_error([](auto& c) { c["n_group"] = 3; });
  EXPECT_NE(e.find("n_group"), std::string::npos) << e;
  e = config_error([](auto& c) { c["topk_group"] = 5; });
  EXPECT_NE(e.find("topk_group"), std::string::npos) << e;
  e = config_error([](auto& c) { c["scoring_func"] = "softmax"; });
  EXPECT_NE(e.find("scoring_func"), std::string::npos) << e;
  e = config_error([](auto& c) { c["num_key_value_heads"] = 1; });
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  e = config_error([](auto& c) { c["rope_scaling"].erase("factor"); });
  EXPECT_NE(e.find("rope_scaling.factor"), std::string::npos) << e;
  // q_lora_rank null: the plain q_proj.
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(ddir("tiny_bf16") + "/config.json"));
  cfg["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse_deepseek_v3_config(cfg, "config.json").q_lora_rank, 0);
}

// A copy of a fixture with one tensor removed or the config edited.
std::string load_error(const std::string& fixture, const std::string& drop,
                       const std::function<void(nlohmann::json&)>& edit_cfg = nullptr) {
  test::TempDir dir;
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(ddir(fixture) + "/config.json"));
  if (edit_cfg) edit_cfg(cfg);
  std::ofstream(dir.str("config.json")) << cfg.dump(2);
  // Rewrite the safetensors without `drop` (header + kept bodies).
  std::ifstream f(ddir(fixture) + "/model.safetensors", std::ios::binary);
  uint64_t hlen = 0;
  f.read(reinterpret_cast<char*>(&hlen), 8);
  std::string h(hlen, '\0');
  f.read(h.data(), std::streamsize(hlen));
  std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(h), out = nlohmann::json::object();
  std::string kept;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__" || it.key() == drop) continue;
    auto off = it->at("data_offsets").get<std::vector<uint64_t>>();
    out[it.key()] = {{"dtype", it->at("dtype")}, {"shape", it->at("shape")},
                     {"data_offsets", {kept.size(), kept.size() + (off[1] - off[0])}}};
    kept += body.substr(off[0], off[1] - off[0]);
  }
  std::string nh = out.dump();
  while (nh.size() % 8) nh += ' ';
  std::ofstream o(dir.str("model.safetensors"), std::ios::binary);
  uint64_t nl = nh.size();
  o.write(reinterpret_cast<const char*>(&nl), 8);
  o.write(nh.data(), std::streamsize(nh.size()));
  o.write(kept.data(), std::streamsize(kept.size()));
  o.close();
  try {
    load_model(dir.str(), test::test_load_options("cpu_ref"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dsv3Errors, MalformedCheckpointsNameTheTensor) {
  EXPECT_EQ(load_error("tiny_bf16", ""), "");
  const std::string x = "model.layers.1.mlp.experts.5.";
  std::string e = load_error("tiny_bf16", x + "up_proj.weight");
  EXPECT_NE(e.find(x + "up_proj"), std::string::npos) << e;
  e = load_error("tiny_bf16", "model.layers.2.mlp.gate.e_score_correction_bias");
  EXPECT_NE(e.find("e_score_correction_bias"), std::string::npos) << e;
  e = load_error("tiny_bf16", "model.layers.0.self_attn.kv_a_layernorm.weight");
  EXPECT_NE(e.find("kv_a_layernorm"), std::string::npos) << e;
  e = load_error("tiny_fp8", "model.layers.3.self_attn.o_proj.weight_scale_inv");  // the MTP layer's
  EXPECT_NE(e.find("model.layers.3.self_attn.o_proj"), std::string::npos) << e;
  e = load_error("kimi_int4", "model.layers.2.mlp.experts.0.down_proj.weight_shape");
  EXPECT_NE(e.find("weight_shape"), std::string::npos) << e;
  // config.json that contradicts the tensors names the field.
  e = load_error("tiny_bf16", "", [](auto& c) { c["moe_intermediate_size"] = 25; });
  EXPECT_NE(e.find("moe_intermediate_size"), std::string::npos) << e;
  e = load_error("tiny_bf16", "", [](auto& c) { c["kv_lora_rank"] = 20; });
  EXPECT_NE(e.find("kv_lora_rank"), std::string::npos) << e;
  e = load_error("tiny_bf16", "", [](auto& c) { c["first_k_dense_replace"] = 2; });
  EXPECT_NE(e.find("model.layers.1.mlp.gate_proj"), std::string::npos) << e;
}

}  // namespace
}  // namespace nibble
