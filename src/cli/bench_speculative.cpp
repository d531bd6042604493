// The speculative-decoding section of `nibble bench decode --spec-draft-tokens K`
// (docs/speculative.md "When it pays"). One sequence, after a prompt:
//   verify cost  c_k = time of one step feeding k + 1 tokens with every row's
//                logits (a verify step) / time of one plain decode step, for
//                k = 1 .. K, interleaved and truncated back after each step so
//                every step runs at the same position; with the weight bytes
//                and distinct experts each reads;
//   draft cost   c_d = one draft-layer forward / one plain decode step (from
//                the speculative run's own timers);
//   end to end   greedy generation of N tokens plain and with k = K: tokens/s,
//                whether the tokens are identical, acceptance per draft
//                position and the mean accepted length;
//   prediction   speed-up(k, a) = E_k(a) / (c_k + k c_d), where
//                E_k(a) = (1 - a^(k+1)) / (1 - a) is the mean tokens per step
//                when each draft is accepted with probability a.
#include "cli/bench_speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "util/error.h"

namespace nibble::cli {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

double expected_tokens_per_step(int64_t k, double a) {
  if (a >= 1.0) return double(k + 1);
  return (1.0 - std::pow(a, double(k + 1))) / (1.0 - a);
}

void bench_speculative(Engine& engine, int64_t K, int64_t prompt_tokens, int64_t steps, int64_t new_tokens,
                       uint64_t seed, bool json, const std::vector<int32_t>& text) {
  if (const std::string why = engine.draft_unavailable(); !why.empty())
    fail("--spec-draft-tokens ", K, ": speculative decoding needs the model's MTP layer: ", why);
  using Clock = std::chrono::steady_clock;
  const int64_t V = engine.vocab_size();
  std::mt19937_64 rng(seed ^ 0x5bec);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng() % uint64_t(V));
    return t;
  };
  const std::vector<int32_t> prompt =
      text.empty() ? random_tokens(prompt_tokens)
                   : std::vector<int32_t>(text.begin(), text.begin() + std::min<int64_t>(prompt_tokens, int64_t(text.size())));

  // Verify cost: steps of 1 .. K + 1 tokens at the same position.
  const SeqId s = engine.create();
  {
    StepInput in{s, prompt, false, false};
    engine.step(std::span<const StepInput>(&in, 1));
  }
  const int64_t P = engine.position(s);
  std::vector<std::vector<double>> times(size_t(K + 1));
  std::vector<uint64_t> bytes(size_t(K + 1));
  std::vector<int64_t> experts(size_t(K + 1));
  auto run = [&](int64_t rows, StepReport* rep) {
    const std::vector<int32_t> toks = random_tokens(rows);
    StepInput in{s, toks, rows > 1, true};
    auto t0 = Clock::now();
    engine.step(std::span<const StepInput>(&in, 1), rep);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    engine.truncate(s, P);
    return dt;
  };
  for (int64_t k = 0; k <= K; ++k) run(k + 1, nullptr);  // warm-up
  for (int64_t rep = 0; rep < steps; ++rep)
    for (int64_t k = 0; k <= K; ++k) times[size_t(k)].push_back(run(k + 1, nullptr));
  for (int64_t k = 0; k <= K; ++k) {
    StepReport r;
    run(k + 1, &r);
    bytes[size_t(k)] = r.weight_bytes;
    experts[size_t(k)] = r.distinct_experts;
  }
  engine.release(s);
  std::vector<double> med(size_t(K + 1)), cost(size_t(K + 1));
  for (int64_t k = 0; k <= K; ++k) med[size_t(k)] = median_of(times[size_t(k)]);
  for (int64_t k = 0; k <= K; ++k) cost[size_t(k)] = med[size_t(k)] / med[0];

  // End to end: greedy, plain and speculative.
  GenerationParams g;
  g.max_new_tokens = new_tokens;
  g.use_model_eos = false;
  g.sampling.temperature = 0;
  const SeqId a = engine.create();
  GenerationResult plain = engine.generate(a, prompt, g);
  engine.release(a);
  g.draft_tokens = K;
  const SeqId b = engine.create();
  GenerationResult spec = engine.generate(b, prompt, g);
  engine.release(b);
  const bool identical = plain.tokens == spec.tokens;
  const double plain_tps = double(plain.tokens.size() - 1) / std::max(plain.decode_seconds, 1e-12);
  const double spec_tps = double(spec.tokens.size() - 1) / std::max(spec.decode_seconds, 1e-12);
  const double draft_cost =
      spec.spec.draft_forwards ? spec.spec.draft_seconds / double(spec.spec.draft_forwards) / med[0] : 0.0;
  const std::vector<double> alphas = {0.5, 0.6, 0.7, 0.8, 0.9};

  if (json) {
    std::printf("{\"speculative\": {\"draft_tokens\": %lld, \"decode_step_s\": %.6g, \"verify\": [", (long long)K, med[0]);
    for (int64_t k = 1; k <= K; ++k)
      std::printf("%s{\"k\": %lld, \"step_s\": %.6g, \"cost_ratio\": %.4f, \"bytes\": %llu, \"distinct_experts\": %lld}",
                  k > 1 ? ", " : "", (long long)k, med[size_t(k)], cost[size_t(k)], (unsigned long long)bytes[size_t(k)],
                  (long long)experts[size_t(k)]);
    std::printf("], \"decode_step_bytes\": %llu, \"draft_cost_ratio\": %.4f, \"plain_tokens_per_s\": %.3f, "
                "\"spec_tokens_per_s\": %.3f, \"identical\": %s, \"mean_accepted_length\": %.4f, \"acceptance\": [",
                (unsigned long long)bytes[0], draft_cost, plain_tps, spec_tps, identical ? "true" : "false",
                spec.spec.mean_accepted_length());
    for (size_t j = 0; j < spec.spec.drafted.size(); ++j)
      std::printf("%s%.4f", j ? ", " : "",
                  spec.spec.drafted[j] ? double(spec.spec.accepted[j]) / double(spec.spec.drafted[j]) : 0.0);
    std::printf("], \"predicted_speedup\": [");
    for (int64_t k = 1; k <= K; ++k) {
      std::printf("%s{\"k\": %lld", k > 1 ? ", " : "", (long long)k);
      for (double al : alphas)
        std::printf(", \"a%.1f\": %.4f", al, expected_tokens_per_step(k, al) / (cost[size_t(k)] + double(k) * draft_cost));
      std::printf("}");
    }
    std::printf("]}}\n");
    return;
  }
  std::printf("\n# speculative decoding (MTP draft), 1 sequence at position %lld (%s prompt), %lld interleaved steps per k\n",
              (long long)P, text.empty() ? "random-token" : "text", (long long)steps);
  std::printf("#   plain decode step %.3f ms, %s read, %lld distinct experts\n", med[0] * 1e3,
              std::to_string(bytes[0] / 1000000).append(" MB").c_str(), (long long)experts[0]);
  for (int64_t k = 1; k <= K; ++k)
    std::printf("#   verify k=%lld (%lld tokens): %.3f ms = %.2fx a decode step, %llu MB read, %lld distinct experts\n",
                (long long)k, (long long)k + 1, med[size_t(k)] * 1e3, cost[size_t(k)],
                (unsigned long long)(bytes[size_t(k)] / 1000000), (long long)experts[size_t(k)]);
  std::printf("#   draft forward: %.2fx a decode step\n", draft_cost);
  std::printf("#   greedy %lld tokens: plain %.2f tok/s, speculative k=%lld %.2f tok/s (%.2fx), tokens %s\n",
              (long long)new_tokens, plain_tps, (long long)K, spec_tps, spec_tps / plain_tps,
              identical ? "identical" : "DIFFERENT");
  std::printf("#   acceptance per draft position:");
  for (size_t j = 0; j < spec.spec.drafted.size(); ++j)
    std::printf(" %lld/%lld", (long long)spec.spec.accepted[j], (long long)spec.spec.drafted[j]);
  std::printf("; mean accepted length %.3f tokens per verify step\n", spec.spec.mean_accepted_length());
  std::printf("#   predicted speed-up E_k(a) / (c_k + k c_d) at per-draft acceptance a:\n#     k ");
  for (double al : alphas) std::printf("  a=%.1f", al);
  std::printf("\n");
  for (int64_t k = 1; k <= K; ++k) {
    std::printf("#   %3lld ", (long long)k);
    for (double al : alphas)
      std::printf("  %5.2f", expected_tokens_per_step(k, al) / (cost[size_t(k)] + double(k) * draft_cost));
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace nibble::cli
