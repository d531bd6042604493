// gpt-oss (GptOssForCausalLM) against transformers: the fixtures of
// tools/gen_gptoss_fixtures.py are tiny random models in the published
// layout (MXFP4 *_blocks / *_scales experts, BF16 attention with sinks),
// with transformers' fp32 logits. Also: incremental decode == full forward,
// a sequence in a mixed batch == alone (bitwise, every runnable kernel),
// truncate / fork, and the errors of a malformed checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/detect.h"
#include "device/device.h"
#include "fixture_util.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/registry.h"
#include "model/gpt_oss_attention.h"
#include "model/gpt_oss.h"
#include "support/batch_invariance.h"
#include "support/run_nibble.h"
#include "support/temp_dir.h"
#include "util/error.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

// Rounding between nibble and the oracle, both f32 (products of BF16 /
// E2M1 values are exact in f32; sums run in other orders): a logit ends a
// chain of ~6 dot products per layer (q/k/v/o, gate_up, down) of length
// K <= 384 plus the attention sums, each off by ~sqrt(K) * 2^-24 = 1.2e-6
// relative at worst; 3 layers and the head give ~2e-5 in the worst case of
// every error lining up. 1e-4 of the largest logit (the bound)
// leaves 5x; a real mistake (a sink dropped, the window off by one, gate and
// up swapped, a rope half wrong) moves logits by >= 1e-2 relative.
constexpr double kRelTol = 1e-4;

// The opt-in int16 kernels (cpu_avx2_int16) round x to int16 per block of
// 32 before the MXFP4 experts: up to 5e-5 relative per dot product (see
// deepseek_v4_hf_test.cpp), two expert products per layer, 3 layers: ~6
// such errors, 1.2e-4 as a random walk, 3e-4 all lined up, plus the f32
// 2e-5. 5e-4 covers the latter and stays below what a real mistake moves
// (>= 1e-2). Observed: 2.6e-4 (tiny_a), 1.2e-4 (tiny_b).
constexpr double kInt16RelTol = 5e-4;

const std::vector<std::string>& gptoss_fixtures() {
  static const std::vector<std::string> names = {"tiny_a", "tiny_b"};
  return names;
}

std::string gdir(const std::string& name) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/fixtures/gptoss/" + name; }

struct Seqs {
  int64_t vocab = 0;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // [n][V]
};

Seqs load_gptoss_expected(const std::string& name) {
  std::ifstream mf(gdir(name) + "/expected/manifest.json");
  nlohmann::json m = nlohmann::json::parse(mf);
  Seqs s;
  s.vocab = m.at("vocab_size").get<int64_t>();
  for (const auto& e : m.at("sequences")) {
    std::vector<int32_t> t = e.at("tokens").get<std::vector<int32_t>>();
    std::vector<float> l(t.size() * size_t(s.vocab));
    std::ifstream lf(gdir(name) + "/expected/" + e.at("logits").get<std::string>(), std::ios::binary);
    lf.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * 4));
    if (!lf) throw std::runtime_error("short logits file for " + name);
    s.tokens.push_back(std::move(t));
    s.logits.push_back(std::move(l));
  }
  return s;
}

// Every MoE kernel name the host runs (linear kernels share the names),
// but those that are not batch invariant by design (registry.h: batch_variant).
std::vector<std::string> runnable_kernels() {
  const Device host = host_cpu_device(2, 10.0);
  std::vector<std::string> names;
  for (const KernelDesc& k : kernel_registry())
    if (k.op == Op::moe && k.unsupported(host).empty() && !k.batch_variant) names.push_back(k.name);
  return names;
}

class GptOssHf : public ::testing::TestWithParam<std::string> {};

TEST_P(GptOssHf, DetectionReadsThePublishedLayout) {
  auto ck = Checkpoint::open(gdir(GetParam()));
  Detection det = detect_formats(*ck);
  EXPECT_TRUE(det.unsupported.empty());
  EXPECT_TRUE(det.warnings.empty());
  EXPECT_NE(det.metadata_schema.find("mxfp4"), std::string::npos) << det.metadata_schema;
  int experts = 0;
  for (const DetectedTensor& t : det.tensors) {
    if (t.name.find(".mlp.experts.") == std::string::npos || t.name.find("_bias") != std::string::npos) continue;
    ++experts;
    EXPECT_EQ(t.format, Format::mxfp4) << t.name;
    ASSERT_EQ(t.parts.size(), 2u);
    EXPECT_EQ(t.parts[0]->name, t.name + "_blocks");
    EXPECT_EQ(t.parts[1]->name, t.name + "_scales");
    // [E, R, C/32, 16] is one [E * R, C] matrix.
    const auto& s = t.parts[0]->shape;
    EXPECT_EQ(t.rows, s[0] * s[1]);
    EXPECT_EQ(t.cols, s[2] * 32);
    EXPECT_NE(t.provenance.find("quant_method mxfp4"), std::string::npos) << t.provenance;
    EXPECT_NE(t.provenance.find("tensors agree"), std::string::npos) << t.provenance;
  }
  EXPECT_GT(experts, 0);
}

// Every fixture sequence's logits through `kernel` against transformers',
// within tol of each position's largest |logit|, with the same argmax.
void expect_kernel_matches(const std::string& name, const Seqs& exp, const std::string& kernel, double tol) {
  SCOPED_TRACE(kernel);
  auto model = load_model(gdir(name), test::test_load_options(kernel));
  ASSERT_EQ(model->architecture(), "GptOssForCausalLM");
  ASSERT_EQ(model->vocab_size(), exp.vocab);
  for (size_t i = 0; i < exp.tokens.size(); ++i)
    test::expect_sequence_matches(*model, exp.tokens[i], exp.logits[i].data(), exp.vocab, tol, name + " " + kernel, i);
}

TEST_P(GptOssHf, FullForwardMatchesTransformers) {
  const std::string name = GetParam();
  const Seqs exp = load_gptoss_expected(name);
  for (const char* kernel : {"cpu_ref", "auto"}) expect_kernel_matches(name, exp, kernel, kRelTol);
}

TEST_P(GptOssHf, Int16BackendMatchesTransformers) {
  if (std::string why = cpu_isa_unsupported(CpuIsa::avx2, host_cpu_features()); !why.empty())
    GTEST_SKIP() << "cpu_avx2_int16: " << why;
  const std::string name = GetParam();
  expect_kernel_matches(name, load_gptoss_expected(name), "cpu_avx2_int16", kInt16RelTol);
}

// Token by token (and in odd chunks) gives the full forward's logits bit for
// bit: the caches hold exactly what later tokens read.
TEST_P(GptOssHf, IncrementalEqualsFullForward) {
  const std::string name = GetParam();
  Seqs exp = load_gptoss_expected(name);
  auto model = load_model(gdir(name), test::test_load_options("auto"));
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
}

// Mixed batches at random chunkings, every runnable kernel: each sequence's
// logits equal it fed alone, bitwise.
TEST_P(GptOssHf, BatchedEqualsAloneBitwise) {
  const std::string name = GetParam();
  Seqs exp = load_gptoss_expected(name);
  for (const std::string& kernel : runnable_kernels()) {
    SCOPED_TRACE(kernel);
    LoadOptions opt = test::test_load_options(kernel);
    opt.max_chunk_tokens = 11;
    auto m = load_model(gdir(name), opt);
    std::vector<std::vector<int32_t>> seqs = exp.tokens;
    seqs.push_back(std::vector<int32_t>(exp.tokens[0].rbegin(), exp.tokens[0].rend()));
    test::expect_random_batches_equal_alone(*m, seqs);
  }
}

// Truncate then refeed equals never fed, at positions on and off the
// sliding window; a fork evolves independently of its origin.
TEST_P(GptOssHf, TruncateAndFork) {
  const std::string name = GetParam();
  Seqs exp = load_gptoss_expected(name);
  auto m = load_model(gdir(name), test::test_load_options("auto"));
  const auto& a = exp.tokens[0];
  const auto& b = exp.tokens[1];
  const int64_t n = int64_t(a.size()), V = m->vocab_size();
  const int64_t window = static_cast<const GptOssModel&>(*m).config().sliding_window;
  std::vector<float> ref(size_t(n * V));
  auto r = m->new_state();
  m->forward(*r, a, ref.data(), true);
  for (int64_t p : {int64_t(0), int64_t(1), window - 1, window, window + 1, n - 1}) {
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
  // Fork at p, feed the fork b, the origin the rest of a: both as if alone.
  const int64_t p = window + 2;
  auto origin = m->new_state();
  m->forward(*origin, std::span<const int32_t>(a.data(), size_t(p)), nullptr, false);
  auto fork = m->fork(*origin);
  EXPECT_EQ(fork->position(), p);
  EXPECT_EQ(fork->memory_bytes(), origin->memory_bytes());
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
  EXPECT_THROW(m->truncate(*origin, -1), Error);
}

// With a small step budget and rollback reach a sliding layer's ring (window
// - 1 + budget + rollback slots) wraps within the fixture's prompt: every
// truncation, above the floor (the ring moves back) or below it (the prefix
// is fed again), then refeed equals never fed, bitwise, against a state with
// the default budget whose ring never wraps.
TEST_P(GptOssHf, SlidingRingTruncatesExactly) {
  const std::string name = GetParam();
  Seqs exp = load_gptoss_expected(name);
  auto big = load_model(gdir(name), test::test_load_options("auto"));
  LoadOptions small_opt = test::test_load_options("auto");
  small_opt.max_chunk_tokens = 3;
  small_opt.rollback_tokens = 2;
  auto m = load_model(gdir(name), small_opt);
  const auto& cfg = static_cast<const GptOssModel&>(*m).config();
  const int64_t window = cfg.sliding_window, ring = window - 1 + 3 + 2;
  std::vector<int32_t> a = exp.tokens[0];
  a.insert(a.end(), exp.tokens[1].begin(), exp.tokens[1].end());
  const auto& b = exp.tokens[1];
  const int64_t n = int64_t(a.size()), V = m->vocab_size();
  ASSERT_GT(n, 2 * ring) << "the prompt must wrap the ring twice";
  std::vector<float> ref(size_t(n * V));
  auto r = big->new_state();
  big->forward(*r, a, ref.data(), true);
  int64_t floors_hit = 0, refeeds = 0;
  for (int64_t p = 0; p <= n; ++p) {
    SCOPED_TRACE("position " + std::to_string(p));
    auto st = m->new_state();
    m->forward(*st, a, nullptr, false);
    const int64_t floor = st->truncate_floor();
    EXPECT_EQ(floor, n - (ring - window + 1)) << "window " << window << ", ring " << ring;
    (p >= floor ? floors_hit : refeeds) += 1;
    m->truncate(*st, p);
    ASSERT_EQ(st->position(), p);
    // Feed other tokens, go back again (from a floor that moved with them).
    m->forward(*st, std::span<const int32_t>(b.data(), std::min<size_t>(b.size(), 4)), nullptr, false);
    m->truncate(*st, p);
    if (p == n) continue;
    std::vector<float> got(size_t((n - p) * V));
    m->forward(*st, std::span<const int32_t>(a.data() + p, size_t(n - p)), got.data(), true);
    ASSERT_EQ(std::memcmp(got.data(), ref.data() + p * V, got.size() * 4), 0);
  }
  EXPECT_GT(floors_hit, 1);
  EXPECT_GT(refeeds, 1);
}

// The ring at the attention level, on every ISA path this CPU has: random
// chunks of 1..3 tokens through a sliding cache of window - 1 + 3 slots give
// bitwise the output of an unbounded cache (the same arithmetic over the same
// keys), and the ring never holds more than its slots; a truncation below
// its floor, or a chunk too long for it, is refused.
void sliding_ring_matches_unbounded_cache(CpuIsa isa) {
  const GqaShape s{4, 2, 8, 5};
  const int64_t kvw = s.kv_heads * s.head_dim, qw = s.heads * s.head_dim, ring = s.window - 1 + 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t n = 40;
  std::vector<float> q(size_t(n * qw)), k(size_t(n * kvw)), v(size_t(n * kvw)), sinks(size_t(s.heads));
  for (auto* vec : {&q, &k, &v, &sinks})
    for (float& x : *vec) x = nd(rng);
  HostGqaCache full(s, 0), r(s, ring);
  std::vector<float> o_full(size_t(n * qw)), o_ring(size_t(n * qw));
  for (int64_t p = 0; p < n;) {
    const int64_t c = std::min<int64_t>(n - p, 1 + int64_t(rng() % 3));
    for (HostGqaCache* cache : {&full, &r}) {
      const GqaSeq seq{cache, 0, c, p};
      float* o = (cache == &full ? o_full : o_ring).data() + p * qw;
      gqa_attend_cpu(s, sinks.data(), seq, q.data() + p * qw, k.data() + p * kvw, v.data() + p * kvw, o, nullptr,
                     isa);
    }
    p += c;
    EXPECT_LE(int64_t(r.kv.k.size()), ring * kvw);
  }
  EXPECT_EQ(std::memcmp(o_full.data(), o_ring.data(), o_full.size() * 4), 0);
  EXPECT_EQ(int64_t(full.kv.k.size()), n * kvw);
  // Positions [n - ring, n) are held: a query at p needs (p - window, p).
  EXPECT_EQ(r.truncate_floor(), n - ring + s.window - 1);
  EXPECT_EQ(full.truncate_floor(), 0);
  EXPECT_THROW(r.truncate(r.truncate_floor() - 1), Error);
  const GqaSeq too_long{&r, 0, ring - s.window + 2, n};
  std::vector<float> big(size_t(too_long.count * qw));
  EXPECT_THROW(
      gqa_attend_cpu(s, sinks.data(), too_long, big.data(), big.data(), big.data(), big.data(), nullptr, isa), Error);
}

TEST(GptOssAttention, SlidingRingMatchesUnboundedCache) {
  for (CpuIsa isa : {CpuIsa::ref, CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_isa_unsupported(isa, host_cpu_features()).empty()) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    sliding_ring_matches_unbounded_cache(isa);
  }
}

// `nibble run --tokens` on a checkpoint without tokenizer.json: greedy ids
// equal transformers' argmax path (recorded by the generator with a safe
// top-2 margin at every step); text without a tokenizer is a clear error.
TEST_P(GptOssHf, RunTokensPrintsTransformersGreedyPath) {
  std::ifstream mf(gdir(GetParam()) + "/expected/manifest.json");
  const nlohmann::json g = nlohmann::json::parse(mf).at("greedy");
  std::string prompt, want;
  for (const auto& t : g.at("prompt")) prompt += (prompt.empty() ? "" : ",") + std::to_string(t.get<int>());
  for (const auto& t : g.at("continuation")) want += (want.empty() ? "" : ",") + std::to_string(t.get<int>());
  const size_t n = g.at("continuation").size();
  test::RunResult r = test::run_nibble({"run", gdir(GetParam()), "--tokens", prompt, "-n", std::to_string(n), "--temp",
                                        "0", "--moe-backend", "cpu_ref", "--linear-backend", "cpu_ref"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n") << r.err;
  test::RunResult text = test::run_nibble({"run", gdir(GetParam()), "-p", "hello"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("no tokenizer.json"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("--tokens"), std::string::npos) << text.err;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GptOssHf, ::testing::ValuesIn(gptoss_fixtures()));

// ---- malformed checkpoints: errors name the tensor ----

// A copy of tiny_a whose safetensors file is rewritten by `edit` (name ->
// (dtype, shape, bytes)).
struct Tensor_ {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::map<std::string, Tensor_> read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t hlen = 0;
  f.read(reinterpret_cast<char*>(&hlen), 8);
  std::string h(hlen, '\0');
  f.read(h.data(), std::streamsize(hlen));
  std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(h);
  std::map<std::string, Tensor_> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    auto off = it->at("data_offsets").get<std::vector<uint64_t>>();
    out[it.key()] = {it->at("dtype").get<std::string>(), it->at("shape").get<std::vector<int64_t>>(),
                     body.substr(off[0], off[1] - off[0])};
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor_>& ts) {
  nlohmann::json j = nlohmann::json::object();
  uint64_t at = 0;
  std::string body;
  for (const auto& [name, t] : ts) {
    j[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
    body += t.bytes;
  }
  std::string h = j.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream f(path, std::ios::binary);
  uint64_t hlen = h.size();
  f.write(reinterpret_cast<const char*>(&hlen), 8);
  f.write(h.data(), std::streamsize(h.size()));
  f.write(body.data(), std::streamsize(body.size()));
}

std::string load_error(const std::function<void(std::map<std::string, Tensor_>&)>& edit) {
  test::TempDir dir;
  fs::copy_file(gdir("tiny_a") + "/config.json", dir.str("config.json"));
  auto ts = read_safetensors(gdir("tiny_a") + "/model.safetensors");
  edit(ts);
  write_safetensors(dir.str("model.safetensors"), ts);
  try {
    load_model(dir.str(), test::test_load_options("cpu_ref"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GptOssErrors, MalformedCheckpointsNameTheTensor) {
  const std::string x = "model.layers.1.mlp.experts.";
  std::string e = load_error([&](auto& ts) { ts.erase(x + "down_proj_scales"); });
  EXPECT_NE(e.find(x + "down_proj_blocks"), std::string::npos) << e;
  EXPECT_NE(e.find("_scales"), std::string::npos) << e;

  e = load_error([&](auto& ts) { ts.erase(x + "gate_up_proj_blocks"); });
  EXPECT_NE(e.find(x + "gate_up_proj_scales"), std::string::npos) << e;

  e = load_error([&](auto& ts) { ts[x + "gate_up_proj_scales"].shape.back() += 1; ts[x + "gate_up_proj_scales"].bytes += std::string(size_t(6 * 128), '\x7f'); });
  EXPECT_NE(e.find(x + "gate_up_proj_scales"), std::string::npos) << e;

  e = load_error([&](auto& ts) { ts.erase("model.layers.0.self_attn.sinks"); });
  EXPECT_NE(e.find("model.layers.0.self_attn.sinks"), std::string::npos) << e;

  e = load_error([&](auto& ts) { ts.erase(x + "down_proj_bias"); });
  EXPECT_NE(e.find(x + "down_proj_bias"), std::string::npos) << e;

  // An expert count that contradicts config.json.
  e = load_error([&](auto& ts) {
    for (const char* s : {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"}) {
      Tensor_& t = ts[x + s];
      t.bytes.resize(t.bytes.size() / size_t(t.shape[0]) * size_t(t.shape[0] - 1));
      t.shape[0] -= 1;
    }
  });
  EXPECT_NE(e.find("num_local_experts"), std::string::npos) << e;
}

}  // namespace
}  // namespace nibble
