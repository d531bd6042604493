// `nibble bench decode [MODEL_DIR] --sequences 1,2,4,8,16`: for each count
// of concurrent sequences, prefill all of them (one batched step per token
// budget), then time decode steps that feed one token to every sequence.
// Reported per row: prefill and decode tokens/s (aggregate and per
// sequence), the weight bytes a decode step really read (every matrix once,
// each distinct routed expert once, counted by routing the step's tokens a
// second time in untimed steps), and the bandwidth bound for those bytes,
// with the read bandwidth measured in the same run right before the row.
//
// Decode steps feed random token ids (seeded): sequences then route like
// independent ones, where greedy decoding of a random-weight model tends to
// repeat one token and so one set of experts, flattering batched decode.
#include "cli/bench_decode.h"
#include "cli/bench_speculative.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <fstream>
#include <iterator>
#include <random>

#include "cli/args.h"
#include "cli/human.h"
#include "cli/load_flags.h"
#include "cli/usage_error.h"
#include "nibble/engine.h"
#include "util/error.h"

namespace nibble::cli {

namespace {

const std::vector<OptionSpec> kOptions = {
    {"--sequences", "LIST", "concurrent sequence counts, comma-separated (default 1,2,4,8,16)"},
    {"-n,--decode-steps", "N", "timed decode steps per row (default 16)"},
    {"--prompt-tokens", "P", "prompt length of every sequence (default 64)"},
    {"--step-tokens", "N", "most tokens one engine step processes: prefill in chunks of this size (default 256)"},
    {"-m,--model", "DIR", "the model folder (instead of the MODEL_DIR argument)"},
    {"-t,--threads", "N", "CPU threads (default: all)"},
    {"--device", "NAME", "host (this machine's CPU, the default) or cuda / cuda:N (a GPU; DeepSeek-V4 models)"},
    {"--moe-backend", "NAME", "routed-experts kernel (default auto)"},
    {"--linear-backend", "NAME", "kernel of the other matrix ops (default auto)"},
    {"--bandwidth", "GBPS", "assume this read bandwidth instead of measuring it per row"},
    {"--seed", "S", "seed of the random prompt and decode tokens (default 0)"},
    {"--profile", "", "time every phase of the steps and print the table at the end (stderr)"},
    {"--no-cuda-graphs", "", "on a GPU, launch every kernel of a decode step by itself instead of as one CUDA graph"},
    {"--spec-draft-tokens", "K", "also measure speculative decoding with the MTP layer: verify cost for k = 1..K, "
                                 "greedy tokens/s and acceptance with k = K (default 0: off)"},
    {"--no-spec", "", "no speculative decoding section (the default)"},
    {"--spec-new-tokens", "N", "tokens the speculative section's greedy runs generate (default 32)"},
    {"--spec-prompt-file", "PATH", "the speculative section's prompt: this text's first --prompt-tokens tokens "
                                   "(default: random tokens; acceptance on random tokens means little)"},
    {"--json", "", "one JSON object per row"},
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  int64_t sequences = 0, prompt_tokens = 0, decode_steps = 0;
  double prefill_tps = 0, decode_tps = 0, per_seq_tps = 0;
  double bytes_per_step = 0, distinct_experts = 0;
  double bandwidth = 0, bound_tps = 0, ratio = 0;
  uint64_t state_bytes = 0;  // per sequence, after the row
};

void print_row(const Row& r, bool json, const std::string& bw_source) {
  if (json) {
    std::printf(
        "{\"sequences\": %lld, \"prompt_tokens\": %lld, \"decode_steps\": %lld, \"prefill_tokens_per_s\": %.3f, "
        "\"decode_tokens_per_s\": %.3f, \"per_sequence_tokens_per_s\": %.3f, \"bytes_per_step\": %.0f, "
        "\"distinct_experts_per_step\": %.1f, \"bandwidth_gbps\": %.3f, \"bandwidth_source\": \"%s\", "
        "\"bound_tokens_per_s\": %.3f, \"ratio\": %.4f, \"state_bytes_per_sequence\": %llu}\n",
        (long long)r.sequences, (long long)r.prompt_tokens, (long long)r.decode_steps, r.prefill_tps, r.decode_tps,
        r.per_seq_tps, r.bytes_per_step, r.distinct_experts, r.bandwidth, bw_source.c_str(), r.bound_tps, r.ratio,
        (unsigned long long)r.state_bytes);
  } else {
    std::printf("%5lld %10.1f %10.2f %9.2f %12s %8.1f %8.1f %9.2f %6.3f %10s\n", (long long)r.sequences,
                r.prefill_tps, r.decode_tps, r.per_seq_tps, human_bytes(r.bytes_per_step).c_str(),
                r.distinct_experts, r.bandwidth, r.bound_tps, r.ratio, human_bytes(double(r.state_bytes)).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int bench_decode(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble bench decode [MODEL_DIR] [--sequences 1,2,4,8,16] [-n N] [--prompt-tokens P]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Batched decode of a whole model, like llama-bench: for each count of\n"
                             "concurrent sequences, prefill tokens/s of all their prompts, then decode\n"
                             "tokens/s (aggregate and per sequence) of steps that feed one token to every\n"
                             "sequence, the weight bytes such a step reads (each distinct routed expert\n"
                             "once), and the bandwidth bound for those bytes: read bandwidth measured\n"
                             "before the row (a fresh buffer, all threads; with --device cuda the GPU's\n"
                             "memory) over bytes per step, times the sequences. Decode feeds random token\n"
                             "ids (seeded). Also in the help of `nibble bench`: decode.",
                             kOptions);
    return 0;
  }
  const std::string dir = model_dir_arg(args, /*shipped_default=*/true, usage);
  const std::vector<int64_t> counts = args.integer_list("--sequences", "1,2,4,8,16", 1, 4096, "a sequence count");
  const int64_t steps = args.integer("--decode-steps", 16, 1, 1000000);
  const int64_t prompt = args.integer("--prompt-tokens", 64, 1, 1 << 20);
  const double given_bw = args.number("--bandwidth", 0, 0.001, 1e6);
  const uint64_t seed = uint64_t(args.integer("--seed", 0, 0, INT64_MAX));
  const bool json = args.has("--json");
  // 15 = kMaxDraftTokens (runtime/speculative.h): the verify step's rollback reach.
  const int64_t spec_k = args.has("--no-spec") ? 0 : args.integer("--spec-draft-tokens", 0, 0, 15);
  const int64_t spec_new = args.integer("--spec-new-tokens", 32, 2, 1 << 20);

  EngineOptions opt = engine_options(args);
  opt.step_tokens = args.integer("--step-tokens", 256, 1, 1 << 20);
  opt.bandwidth_gbps = given_bw > 0 ? given_bw : 1.0;  // the planner's bound is not used here
  ProgressBar bar(stderr, load_progress_mode());
  show_load_progress(opt, bar);
  auto engine = Engine::load(dir, opt);
  bar.finish();
  const int64_t V = engine->vocab_size();
  if (prompt + steps + 2 > engine->max_context())
    usage_fail("--prompt-tokens ", prompt, " + -n ", steps, " do not fit the model's context of ", engine->max_context());
  const std::string bw_source = given_bw > 0 ? "--bandwidth flag" : "measured";
  const std::string where = engine->device() == "host"
                                ? "the CPU, " + std::to_string(engine->threads()) + " threads"
                                : engine->device() + " (" + engine->device_description() + ")";
  if (!json)
    std::printf("# %s on %s, prompts of %lld tokens, %lld decode steps per row\n"
                "%5s %10s %10s %9s %12s %8s %8s %9s %6s %10s\n",
                dir.c_str(), where.c_str(), (long long)prompt, (long long)steps, "seqs", "prefill/s", "decode/s",
                "per-seq/s", "bytes/step", "experts", "GB/s", "bound/s", "ratio", "state/seq");

  using Clock = std::chrono::steady_clock;
  std::mt19937_64 rng(seed);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng() % uint64_t(V));
    return t;
  };
  for (int64_t S : counts) {
    Row r;
    r.sequences = S;
    r.prompt_tokens = prompt;
    r.decode_steps = steps;
    std::vector<SeqId> ids;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < S; ++i) {
      ids.push_back(engine->create());
      prompts.push_back(random_tokens(prompt));
    }
    // Prefill: all prompts in one call (Engine splits it under its token budget).
    std::vector<StepInput> batch;
    for (int64_t i = 0; i < S; ++i) batch.push_back(StepInput{ids[size_t(i)], prompts[size_t(i)], false});
    auto t0 = Clock::now();
    engine->step(batch);
    r.prefill_tps = double(S * prompt) / std::chrono::duration<double>(Clock::now() - t0).count();

    // Decode: one warm-up step, `steps` timed ones, two counted ones. Each
    // step also draws every sequence's next token greedily, as the server
    // does (on a GPU only the ids come back); the random tokens are fed.
    std::vector<int32_t> next, drawn(static_cast<size_t>(S));
    SamplingParams greedy;
    greedy.temperature = 0;
    auto decode_step = [&](StepReport* report) {
      next = random_tokens(S);
      batch.clear();
      for (int64_t i = 0; i < S; ++i) {
        StepInput in{ids[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1)};
        in.sample = &greedy;
        in.token = &drawn[size_t(i)];
        batch.push_back(in);
      }
      auto s0 = Clock::now();
      engine->step(batch, report);
      return std::chrono::duration<double>(Clock::now() - s0).count();
    };
    decode_step(nullptr);
    std::vector<double> times;
    for (int64_t k = 0; k < steps; ++k) times.push_back(decode_step(nullptr));
    const double step_s = median(times);
    r.decode_tps = double(S) / step_s;
    r.per_seq_tps = 1.0 / step_s;
    double bytes = 0, experts = 0;
    for (int k = 0; k < 2; ++k) {
      StepReport rep;
      decode_step(&rep);
      bytes += double(rep.weight_bytes) / 2;
      experts += double(rep.distinct_experts) / 2;
    }
    r.bytes_per_step = bytes;
    r.distinct_experts = experts;
    r.state_bytes = engine->memory_bytes(ids[0]);
    for (SeqId id : ids) engine->release(id);
    r.bandwidth = given_bw > 0 ? given_bw : engine->measure_bandwidth_gbps();
    r.bound_tps = double(S) * r.bandwidth * 1e9 / bytes;
    r.ratio = r.decode_tps / r.bound_tps;
    print_row(r, json, bw_source);
    // On a GPU, the step graphs so far (counts, host time per launch).
    if (const std::string rep = engine->backend_report(); !rep.empty())
      std::fprintf(json ? stderr : stdout, "# %lld sequences: %s\n", (long long)S, rep.c_str());
  }
  if (spec_k > 0) {
    std::vector<int32_t> text;
    if (args.has("--spec-prompt-file")) {
      const std::string path = args.str("--spec-prompt-file", "");
      std::ifstream f(path, std::ios::binary);
      if (!f) usage_fail("--spec-prompt-file ", path, ": cannot read it");
      const std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      text = engine->tokenize(body, false);
      if (engine->bos_token_id() >= 0) text.insert(text.begin(), int32_t(engine->bos_token_id()));
    }
    bench_speculative(*engine, spec_k, prompt, steps, spec_new, seed, json, text);
  }
  return 0;
}

}  // namespace nibble::cli
