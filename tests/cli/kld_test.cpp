// `nibble kld`: the KL / perplexity math against closed forms and an
// independent long-double computation; the command's numbers against KL
// computed here from `nibble logits` of both kernel configurations; its
// errors; and the acceptance bound of the shipped model: mean KL between
// the default (exact) kernels and the f64 reference over 1,024 held-out
// positions within what f32 rounding allows (kExactMeanKl below), and
// <= 0.01 nats for the opt-in kernels that round activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli_util.h"
#include "runtime/kl_divergence.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

using testing::run_nibble;
using testing::TempDir;

const std::string kModel = std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
const std::string kHeldout = kModel + "/heldout.txt";

// KL(p || q) the textbook way, in long double without any max shift:
// p_i = e^{b_i} / sum e^{b}, KL = sum p_i ln(p_i / q_i).
long double kl_direct(const std::vector<float>& b, const std::vector<float>& t) {
  long double zb = 0, zt = 0;
  for (float v : b) zb += std::exp((long double)v);
  for (float v : t) zt += std::exp((long double)v);
  long double kl = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const long double p = std::exp((long double)b[i]) / zb, q = std::exp((long double)t[i]) / zt;
    kl += p * std::log(p / q);
  }
  return kl;
}

long double prob_direct(const std::vector<float>& x, size_t i) {
  long double z = 0;
  for (float v : x) z += std::exp((long double)v);
  return std::exp((long double)x[i]) / z;
}

size_t argmax(const float* x, size_t n) {
  size_t at = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[at]) at = i;
  return at;
}

TEST(KlMath, ClosedForms) {
  // p = (1/2, 1/2), q = (1/4, 3/4): KL(p||q) = ln(4/3) / 2; KL(q||p) differs.
  const std::vector<float> b = {0.0f, 0.0f}, t = {0.0f, float(std::log(3.0))};
  TokenComparison c = compare_logits(b, t, 1);
  EXPECT_NEAR(c.kl, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(compare_logits(t, b, 1).kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(c.p_base, 0.5, 1e-12);
  EXPECT_NEAR(c.p_test, 0.75, 1e-7);
  EXPECT_NEAR(c.nll_base, std::log(2.0), 1e-12);
  EXPECT_NEAR(c.nll_test, -std::log(0.75), 1e-7);
  EXPECT_EQ(c.top_base, 0);  // a tie: the lowest id
  EXPECT_EQ(c.top_test, 1);
  // Identical logits: exactly zero, whatever the offset (softmax is shift-invariant).
  const std::vector<float> x = {1.5f, -2.0f, 0.25f}, y = {101.5f, 98.0f, 100.25f};
  EXPECT_NEAR(compare_logits(x, y, 2).kl, 0.0, 1e-12);
  // Large logits do not overflow (log-softmax shifts by the max).
  const std::vector<float> big = {1000.0f, 999.0f}, small = {0.0f, -1.0f};
  EXPECT_NEAR(compare_logits(big, small, 0).kl, 0.0, 1e-12);
}

TEST(KlMath, RandomLogitsMatchTheDirectFormula) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t vocab = 50 + size_t(trial) * 37;
    std::vector<float> b(vocab), t(vocab);
    for (size_t i = 0; i < vocab; ++i) {
      b[i] = n(rng);
      t[i] = b[i] + 0.05f * float(trial) * n(rng);  // from identical to far apart
    }
    const int32_t target = int32_t(rng() % vocab);
    TokenComparison c = compare_logits(b, t, target);
    const long double want = kl_direct(b, t);
    EXPECT_NEAR(c.kl, double(want), 1e-12 + 1e-9 * double(want)) << trial;
    EXPECT_GE(c.kl, -1e-15);
    EXPECT_NEAR(c.p_base, double(prob_direct(b, size_t(target))), 1e-12);
    EXPECT_NEAR(c.p_test, double(prob_direct(t, size_t(target))), 1e-12);
    EXPECT_EQ(size_t(c.top_base), argmax(b.data(), vocab));
    EXPECT_EQ(size_t(c.top_test), argmax(t.data(), vocab));
  }
}

TEST(KlMath, BadInputIsAnError) {
  const std::vector<float> a = {0.0f, 1.0f}, b3 = {0.0f, 1.0f, 2.0f};
  EXPECT_THROW(compare_logits(a, a, 2), Error);
  EXPECT_THROW(compare_logits(a, a, -1), Error);
  EXPECT_THROW(compare_logits(a, b3, 0), Error);
  const std::vector<float> nan = {0.0f, std::nanf("")};
  EXPECT_THROW(compare_logits(a, nan, 0), Error);
  EXPECT_THROW(summarize_comparisons({}), Error);
}

TEST(KlMath, SummaryStatistics) {
  // Percentiles interpolate linearly between order statistics (numpy's default):
  // np.percentile([1,2,3,4], [50, 99]) = [2.5, 3.97].
  const std::vector<double> s = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_sorted(s, 0.5), 2.5);
  EXPECT_NEAR(percentile_sorted(s, 0.99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted(s, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(s, 1.0), 4.0);

  // Four positions with hand-picked values.
  std::vector<TokenComparison> v(4);
  const double kl[] = {0.4, 0.1, 0.3, 0.2};
  const double nb[] = {1.0, 2.0, 3.0, 2.0}, nt[] = {1.5, 2.0, 2.5, 3.0};
  for (size_t i = 0; i < 4; ++i) {
    v[i].kl = kl[i];
    v[i].nll_base = nb[i];
    v[i].nll_test = nt[i];
    v[i].p_base = std::exp(-nb[i]);
    v[i].p_test = std::exp(-nt[i]);
    v[i].top_base = 5;
    v[i].top_test = i == 2 ? 6 : 5;
  }
  KlSummary r = summarize_comparisons(v);
  EXPECT_EQ(r.positions, 4);
  EXPECT_NEAR(r.kl.mean, 0.25, 1e-15);
  // sample sd of {.1,.2,.3,.4} = sqrt(0.05/3); / sqrt(4)
  EXPECT_NEAR(r.kl.error, std::sqrt(0.05 / 3.0) / 2.0, 1e-15);
  EXPECT_NEAR(r.kl_median, 0.25, 1e-15);
  EXPECT_NEAR(r.kl_max, 0.4, 1e-15);
  EXPECT_NEAR(r.kl_min, 0.1, 1e-15);
  EXPECT_NEAR(r.kl_p99, 0.1 + 0.99 * 3 * 0.1, 1e-12);
  EXPECT_NEAR(r.ppl_base, std::exp(2.0), 1e-12);
  EXPECT_NEAR(r.ppl_test, std::exp(2.25), 1e-12);
  EXPECT_NEAR(r.ln_ppl_ratio.mean, 0.25, 1e-15);
  EXPECT_EQ(r.same_top, 3);
  EXPECT_DOUBLE_EQ(r.same_top_fraction, 0.75);
}

// ---- the command ----

bool shipped_model_present() { return std::filesystem::exists(kModel + "/model.safetensors"); }

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string bytes = s.str();
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

using test::read_file;  // tests/support

// The routed-experts kernels this machine can run on the shipped model,
// from `nibble explain --json` (no names hard-coded): the planner's choice
// and every rejected one that is only slower or opt-in; cpu_ref (the base)
// left out. `lossy` marks kernels whose rejection says they round (opt-in
// int8 activations).
struct MoeKernel {
  std::string name;
  bool lossy = false;
};
std::vector<MoeKernel> runnable_moe_kernels() {
  auto r = run_nibble({"explain", kModel, "--json", "--bandwidth", "10"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<MoeKernel> out;
  const nlohmann::json plan = nlohmann::json::parse(r.out);
  for (const auto& g : plan.at("groups")) {
    if (g.at("group") != "routed_experts" || !g.contains("op")) continue;
    if (g.at("kernel").is_string() && g.at("kernel") != "cpu_ref") out.push_back({g.at("kernel"), false});
    for (const auto& rej : g.at("rejected")) {
      const std::string name = rej.at("kernel"), why = rej.at("reason");
      if (name == "cpu_ref") continue;
      if (why.rfind("slower", 0) == 0) {
        out.push_back({name, false});
      } else if (why.find("opt in with") != std::string::npos) {
        out.push_back({name, why.find("lossy") != std::string::npos});
      }
    }
  }
  return out;
}

// `nibble kld` over the first n text tokens of heldout.txt in one chunk must
// report what this test computes from `nibble logits` of the same tokens
// (BOS first) under both kernel configurations.
TEST(KldCommand, AgreesWithKlOfLogitsFromBothBackends) {
  ASSERT_TRUE(shipped_model_present()) << kModel << " is committed; a checkout without it is broken";
  const size_t n = 48;
  const Tokenizer tok = Tokenizer::from_file(kModel + "/tokenizer.json");
  std::vector<int32_t> text = tok.encode(read_file(kHeldout), /*allow_special=*/false);
  ASSERT_GT(text.size(), n);
  text.resize(n);
  std::string ids = "0";  // BOS, then all but the last text token
  for (size_t i = 0; i + 1 < n; ++i) ids += "," + std::to_string(text[i]);

  TempDir dir;
  const std::vector<std::string> common = {"--threads", "1", "--bandwidth", "10"};
  auto logits = [&](const std::string& out, const std::string& moe, const std::string& linear) {
    std::vector<std::string> a = {"logits", kModel, "--tokens", ids, "--out", dir.str(out), "--moe-backend", moe,
                                  "--linear-backend", linear};
    a.insert(a.end(), common.begin(), common.end());
    auto r = run_nibble(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_f32(dir.str(out));
  };
  // Base: the reference; test: the reference MoE with the planner's other
  // kernels, the default of everything, and every other runnable MoE kernel.
  const std::vector<float> ref = logits("ref.f32", "cpu_ref", "cpu_ref");
  std::vector<std::string> moes = {"cpu_ref", "auto"};
  bool any_lossy = false;
  for (const auto& k : runnable_moe_kernels()) {
    moes.push_back(k.name);
    any_lossy |= k.lossy;
  }
  double largest_mean = 0;
  for (const std::string& moe : moes) {
    const std::vector<float> fast = logits("fast.f32", moe, "auto");
    const size_t vocab = 4096;
    ASSERT_EQ(ref.size(), n * vocab);
    ASSERT_EQ(fast.size(), n * vocab);
    std::vector<double> kl(n);
    long double nll_b = 0, nll_t = 0, kl_sum = 0;
    int same = 0;
    for (size_t i = 0; i < n; ++i) {
      std::vector<float> b(ref.begin() + std::ptrdiff_t(i * vocab), ref.begin() + std::ptrdiff_t((i + 1) * vocab));
      std::vector<float> t(fast.begin() + std::ptrdiff_t(i * vocab), fast.begin() + std::ptrdiff_t((i + 1) * vocab));
      kl[i] = double(kl_direct(b, t));
      kl_sum += kl[i];
      nll_b -= std::log(prob_direct(b, size_t(text[i])));
      nll_t -= std::log(prob_direct(t, size_t(text[i])));
      same += argmax(b.data(), vocab) == argmax(t.data(), vocab);
    }
    std::sort(kl.begin(), kl.end());

    std::vector<std::string> a = {"kld", kModel, "--text", kHeldout, "--tokens", std::to_string(n), "--ctx",
                                  "64", "--moe-backend", moe, "--json"};
    a.insert(a.end(), common.begin(), common.end());
    auto r = run_nibble(a);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("positions").get<size_t>(), n);
    EXPECT_EQ(j.at("chunks").get<int>(), 1);
    EXPECT_EQ(j.at("base").at("moe_kernels"), "cpu_ref");
    EXPECT_EQ(j.at("base").at("linear_kernels"), "cpu_ref");
    const double mean = double(kl_sum / n);
    EXPECT_GT(mean, 0.0) << "the kernels should differ somewhere in the last bits";
    EXPECT_NEAR(j.at("kld").at("mean").get<double>(), mean, 1e-9 + 1e-6 * mean) << moe;
    EXPECT_NEAR(j.at("kld").at("max").get<double>(), kl.back(), 1e-9 + 1e-6 * kl.back()) << moe;
    EXPECT_NEAR(j.at("kld").at("median").get<double>(), 0.5 * (kl[n / 2 - 1] + kl[n / 2]), 1e-9) << moe;
    EXPECT_NEAR(j.at("base").at("ppl").get<double>(), double(std::exp(nll_b / n)), 1e-6) << moe;
    EXPECT_NEAR(j.at("test").at("ppl").get<double>(), double(std::exp(nll_t / n)), 1e-6) << moe;
    EXPECT_EQ(j.at("same_top").get<int>(), same) << moe;
    largest_mean = std::max(largest_mean, mean);
  }
  // A kernel that rounds activations moves the distributions measurably, so
  // the agreement above was also checked on KL values far from zero.
  if (any_lossy) {
    EXPECT_GT(largest_mean, 1e-8);
  }
}

// What f32 rounding allows between the exact kernels and the f64
// reference. If every logit of a position moves by at most d, then
// KL(p || q) = ln E_p[e^delta] - E_p[delta] <= (2d)^2 / 8 = d^2 / 2
// (Hoeffding's lemma, delta in [-d, d]), and |ln p_t - ln q_t| <= 2d for the
// target token, so |ln(ppl_test / ppl_base)| <= 2d. The exact kernels differ
// from the reference only by f32 rounding, held to 1e-5 of the position's
// largest |logit| (the forward's f32 budget, deepseek_v4_hf_test.cpp); the
// shipped model's logits stay below 16 in magnitude (13.2 over 200 probed
// positions), so d <= 1e-5 * 32 with a 2x margin: mean KL <= 5.1e-8 and the
// log perplexity ratio <= 6.4e-4. Observed: 5.9e-14 nats (issue 11). An
// f32 kernel that drops a scale or misroutes an expert moves KL by >= 1e-4.
constexpr double kExactLogitDelta = 1e-5 * 32;
constexpr double kExactMeanKl = kExactLogitDelta * kExactLogitDelta / 2;

// Acceptance (issue 4): default kernels vs the f64 reference on >= 1,000
// positions of held-out text (Julius Caesar; the model never saw it).
TEST(KldCommand, DefaultKernelsMeanKlWithinF32Rounding) {
  ASSERT_TRUE(shipped_model_present()) << kModel << " is committed; a checkout without it is broken";
#ifdef NIBBLE_SANITIZE
  // The sanitizer build runs a quarter of the positions; the
  // optimized build checks the full 1,024 positions.
  const int positions = 256;
#else
  const int positions = 1024;
#endif
  auto r = run_nibble({"kld", "--text", kHeldout, "--tokens", std::to_string(positions), "--bandwidth", "10",
                       "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("positions").get<int>(), positions);
  EXPECT_EQ(j.at("chunks").get<int>(), (positions + 510) / 511);
  EXPECT_EQ(j.at("test").at("moe_backend"), "auto");
  EXPECT_EQ(j.at("test").at("device"), "host");
  EXPECT_EQ(j.at("base").at("device"), "host");
  const double mean = j.at("kld").at("mean").get<double>();
  EXPECT_LE(mean, kExactMeanKl);
  EXPECT_LE(j.at("kld").at("max").get<double>(), kExactMeanKl);  // the bound holds per position
  EXPECT_GE(mean, 0.0);
  EXPECT_LE(j.at("kld").at("p99").get<double>(), j.at("kld").at("max").get<double>());
  EXPECT_GE(j.at("same_top_fraction").get<double>(), 0.95);
  // The two perplexities agree to within 2d (see kExactMeanKl).
  EXPECT_NEAR(std::log(j.at("test").at("ppl").get<double>() / j.at("base").at("ppl").get<double>()), 0.0,
              2 * kExactLogitDelta);
  std::printf("[kld] %d positions: mean KL %.3g nats, p99 %.3g, max %.3g, same top %.2f%%, test kernels moe %s / "
              "linear %s\n",
              positions, mean, j.at("kld").at("p99").get<double>(), j.at("kld").at("max").get<double>(),
              100 * j.at("same_top_fraction").get<double>(), j.at("test").at("moe_kernels").get<std::string>().c_str(),
              j.at("test").at("linear_kernels").get<std::string>().c_str());
}

// The opt-in kernels that round (int8 activations) meet the same bound (on
// one 512-token chunk each, to keep the test short; bench/DECODE.md has
// them over the whole text).
TEST(KldCommand, OptInLossyKernelsMeanKlAtMostOneHundredthNat) {
  ASSERT_TRUE(shipped_model_present()) << kModel << " is committed; a checkout without it is broken";
#ifdef NIBBLE_SANITIZE
  const int positions = 128;
#else
  const int positions = 511;
#endif
  int tested = 0;
  for (const auto& k : runnable_moe_kernels()) {
    if (!k.lossy) continue;
    auto r = run_nibble({"kld", "--text", kHeldout, "--tokens", std::to_string(positions), "--moe-backend", k.name,
                         "--bandwidth", "10", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("test").at("moe_kernels"), k.name);
    const double mean = j.at("kld").at("mean").get<double>();
    EXPECT_LE(mean, 0.01) << k.name;
    EXPECT_GE(j.at("same_top_fraction").get<double>(), 0.95) << k.name;
    std::printf("[kld] %s: %d positions, mean KL %.3g nats, p99 %.3g, max %.3g, same top %.2f%%\n", k.name.c_str(),
                positions, mean, j.at("kld").at("p99").get<double>(), j.at("kld").at("max").get<double>(),
                100 * j.at("same_top_fraction").get<double>());
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no lossy opt-in MoE kernel runs on this machine";
}

TEST(KldCommand, TextReport) {
  ASSERT_TRUE(shipped_model_present()) << kModel << " is committed; a checkout without it is broken";
  TempDir dir;
  testing::write_text(dir.str("t.txt"), "Friends, Romans, countrymen, lend me your ears;\n");
  auto r = run_nibble({"kld", kModel, "--text", dir.str("t.txt"), "--ctx", "8", "--bandwidth", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"Mean    KLD:", "99.0%   KLD:", "Median  KLD:", "Maximum KLD:", "PPL(base)", "PPL(test)",
                           "Same top", "chunks of up to 8 tokens", "base : host, --moe-backend cpu_ref (cpu_ref)",
                           "test : host, --moe-backend auto"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(KldCommand, Errors) {
  TempDir dir;
  auto expect_error = [](const std::vector<std::string>& args, const std::string& needle) {
    auto r = run_nibble(args);
    EXPECT_NE(r.exit_code, 0) << needle;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  };
  expect_error({"kld", kModel}, "--text is required");
  expect_error({"kld", kModel, "--text", dir.str("nope.txt")}, "nope.txt is not a readable file");
  expect_error({"kld", kModel, "--text", dir.str()}, "is not a readable file");
  expect_error({"kld", kModel, "--text"}, "--text");
  expect_error({"kld", kModel, "--text", kHeldout, "--bogus"}, "--bogus");
  expect_error({"kld", kModel, "--text", kHeldout, "--ctx", "1"}, "--ctx");
  expect_error({"kld", kModel, "--text", kHeldout, "--tokens", "0"}, "--tokens");
  expect_error({"kld", kModel, "--text", kHeldout, "--tokens", "ten"}, "--tokens");
  expect_error({"kld", kModel, kModel, "--text", kHeldout}, "at most one MODEL_DIR");
  expect_error({"kld", dir.str(), "--text", kHeldout}, "no tokenizer.json");
  testing::write_text(dir.str("empty.txt"), "");
  expect_error({"kld", kModel, "--text", dir.str("empty.txt")}, "encodes to 0 tokens; at least 2 are needed");
  testing::write_text(dir.str("one.txt"), "A");
  expect_error({"kld", kModel, "--text", dir.str("one.txt")}, "encodes to 1 token; at least 2 are needed");
  testing::write_text(dir.str("bad.txt"), std::string("ok \xff\xfe"));
  expect_error({"kld", kModel, "--text", dir.str("bad.txt")}, "not valid UTF-8");
  // The test run may go to a GPU; the planning devices are usage errors.
  expect_error({"kld", kModel, "--text", kHeldout, "--device", "sm_90"}, "sm_90 is a device to plan for");
  if (shipped_model_present()) {
    expect_error({"kld", kModel, "--text", kHeldout, "--moe-backend", "no_such_kernel", "--bandwidth", "10"},
                 "no_such_kernel");
    expect_error({"kld", kModel, "--text", kHeldout, "--base-linear-backend", "no_such_kernel", "--bandwidth", "10"},
                 "no_such_kernel");
  }
  if (shipped_model_present()) {
    // A model with a 64-token context: chunks default to 64 tokens, and a longer --ctx is refused.
    TempDir short_ctx;
    for (const char* f : {"model.safetensors", "tokenizer.json"})
      std::filesystem::create_symlink(kModel + "/" + f, short_ctx.str(f));
    std::ifstream in(kModel + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["max_position_embeddings"] = 64;
    testing::write_text(short_ctx.str("config.json"), cfg.dump());
    expect_error({"kld", short_ctx.str(), "--text", kHeldout, "--ctx", "65", "--bandwidth", "10"},
                 "--ctx 65 is longer than the model's context of 64 tokens");
    auto r = run_nibble({"kld", short_ctx.str(), "--text", kHeldout, "--tokens", "70", "--bandwidth", "10", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("ctx").get<int>(), 64);
    EXPECT_EQ(j.at("chunks").get<int>(), 2);  // 63 + 7 positions
  }
  auto help = run_nibble({"kld", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: nibble kld"), std::string::npos);
  EXPECT_NE(help.out.find("--base-moe-backend"), std::string::npos);
}

}  // namespace
}  // namespace nibble
