// `nibble kld [MODEL_DIR] --text FILE`: how far a kernel configuration moves
// the model's next-token distributions from a reference configuration. The
// same model is loaded twice, once with the base backends (default cpu_ref:
// scalar, f64 accumulation) and once with the test backends (default: the
// planner's choice), both run over the same text, and every position's two
// distributions are compared: KL(P_base || P_test), top-token agreement, both
// perplexities. The report follows llama.cpp's `llama-perplexity
// --kl-divergence`.
//
// Chunking: the text is tokenized once (special-token strings in it are plain
// text). Chunk k is a fresh sequence: one context token (BOS, or when the
// model has none the token before the chunk) and then up to ctx - 1 text
// tokens; every text token is predicted once, from the tokens before it in
// its chunk. So the positions scored are the text tokens (all but the first
// without BOS), at most --tokens of them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/args.h"
#include "cli/usage_error.h"
#include "cli/command.h"
#include "cli/load_flags.h"
#include "cli/text_generation.h"
#include "convert/progress.h"
#include "nibble/engine.h"
#include "runtime/kl_divergence.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {"--text", "FILE", "UTF-8 text to evaluate (required)"},
    {"--tokens", "N", "score at most N positions (default: the whole text)"},
    {"--ctx", "N", "tokens per chunk, context token included (default 512, or the model's context if shorter)"},
    {"--base-moe-backend", "NAME", "routed-experts kernel of the base run (default cpu_ref)"},
    {"--base-linear-backend", "NAME", "kernel of the base run's other matrix ops (default cpu_ref)"},
    {"--moe-backend", "NAME", "routed-experts kernel of the test run (default auto)"},
    {"--linear-backend", "NAME", "kernel of the test run's other matrix ops (default auto)"},
    {"--device", "NAME", "where the test run runs: host (default) or cuda / cuda:N (the GPU against the CPU's base "
                         "run)"},
    {"-m,--model", "DIR", "the model folder (instead of the MODEL_DIR argument)"},
    {"-t,--threads", "N", "CPU threads (default: all)"},
    {"--bandwidth", "GBPS", "memory bandwidth the planner assumes (default: not measured; it does not change the CPU plan)"},
    {"--no-check-weights", "", "skip the load-time check for NaN scale codes in the weights"},
    {"--json", "", "print one JSON object instead of the report"},
};

// Tokens fed per forward call: bounds the logits held at once
// (2 x kPiece x vocab f32) without changing them.
constexpr size_t kPiece = 64;

using Clock = std::chrono::steady_clock;

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("--text: ", path, " is not a readable file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--text: cannot open ", path);
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) fail("--text: read error in ", path);
  return s.str();
}

struct Side {
  std::string moe_flag, linear_flag;  // as given: a kernel name or "auto"
  std::string device = "host";        // the base run's is always host
  std::unique_ptr<Engine> engine;
  double seconds = 0;
};

nlohmann::json side_json(const Side& s, double ppl) {
  return {{"device", s.engine->device()},
          {"moe_backend", s.moe_flag},
          {"linear_backend", s.linear_flag},
          {"moe_kernels", s.engine->kernels("moe")},
          {"linear_kernels", s.engine->kernels("linear")},
          {"ppl", ppl},
          {"seconds", s.seconds}};
}

int run_kld(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble kld [MODEL_DIR] --text FILE [--tokens N] [--ctx N] [options]";
  if (args.help) {
    std::cout << format_help(
        usage,
        "Runs the model twice over a text, with the base kernels (default cpu_ref, the\n"
        "scalar f64 reference) and the test kernels (default: the planner's choice),\n"
        "and compares their next-token distributions at every position: KL divergence\n"
        "KL(P_base || P_test) in nats (mean +- standard error, median, percentiles,\n"
        "max), how often the top tokens agree, the change in the true token's\n"
        "probability, and both perplexities (as llama-perplexity --kl-divergence).\n"
        "The text is cut into chunks of --ctx tokens, each a fresh sequence starting\n"
        "with BOS. Without MODEL_DIR it uses the shipped model (models/dsv4-tiny).",
        kOptions);
    return 0;
  }
  const std::string dir = model_dir_arg(args, /*shipped_default=*/true, usage);
  if (!args.has("--text")) usage_fail("--text is required (usage: ", usage, ")");
  const std::string text_path = args.str("--text");
  const int64_t max_positions = args.integer("--tokens", INT64_MAX, 1, INT64_MAX);
  const int64_t ctx_flag = args.has("--ctx") ? args.integer("--ctx", 0, 2, int64_t(1) << 40) : 0;
  const bool json = args.has("--json");
  const std::string text = read_text_file(text_path);  // before the slow loads: a bad path fails fast

  if (Tokenizer::file_in(dir).empty())
    fail(dir, ": no tokenizer.json or tiktoken.model (kld tokenizes --text with it)");
  const Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
  const std::vector<int32_t> stream = tokenizer.encode(text, /*allow_special=*/false);
  if (stream.size() < 2)
    fail("--text: ", text_path, " encodes to ", stream.size(), " token", stream.size() == 1 ? "" : "s",
         "; at least 2 are needed");

  Side base, test;
  base.moe_flag = args.str("--base-moe-backend", "cpu_ref");
  base.linear_flag = args.str("--base-linear-backend", "cpu_ref");
  test.moe_flag = args.str("--moe-backend", "auto");
  test.linear_flag = args.str("--linear-backend", "auto");
  check_backend_name("--base-moe-backend", base.moe_flag, true);
  check_backend_name("--base-linear-backend", base.linear_flag, false);
  check_backend_name("--moe-backend", test.moe_flag, true);
  check_backend_name("--linear-backend", test.linear_flag, false);
  const int threads = threads_arg(args);
  test.device = device_arg(args);
  for (Side* s : {&base, &test}) {
    EngineOptions opt;
    opt.device = s->device;
    opt.threads = threads;
    opt.bandwidth_gbps = args.number("--bandwidth", kUnmeasuredBandwidthGbps, 0.001, 1e6);
    opt.moe_backend = s->moe_flag;
    opt.linear_backend = s->linear_flag;
    opt.check_weights = !args.has("--no-check-weights");
    opt.load_tokenizer = false;  // kld tokenizes --text itself, once
    // Large models take minutes to load (and on a GPU to upload): a bar per run.
    ProgressBar bar(stderr, load_progress_mode());
    show_load_progress(opt, bar);
    try {
      s->engine = Engine::load(dir, opt);
      bar.finish();
    } catch (const Error& e) {
      // The planner names --moe-backend / --linear-backend; say which run.
      if (s == &base)
        fail("base run (--base-moe-backend ", s->moe_flag, ", --base-linear-backend ", s->linear_flag,
             "): ", e.what());
      fail("test run (--device ", s->device, ", --moe-backend ", s->moe_flag, ", --linear-backend ", s->linear_flag,
           "): ", e.what());
    }
  }
  const int64_t vocab = base.engine->vocab_size();
  if (int64_t(tokenizer.vocab_size()) > vocab)
    fail(tokenizer.path(), ": the tokenizer has ", tokenizer.vocab_size(), " ids but the model's vocab_size is ", vocab);
  const int64_t bos = base.engine->bos_token_id();
  const int64_t max_ctx = base.engine->max_context();
  const int64_t ctx = ctx_flag > 0 ? ctx_flag : std::min<int64_t>(512, max_ctx);
  if (ctx > max_ctx) fail("--ctx ", ctx, " is longer than the model's context of ", max_ctx, " tokens");

  // Text tokens to predict: all of them after BOS, else all but the first.
  const size_t first = bos >= 0 ? 0 : 1;
  const size_t n_score = size_t(std::min<int64_t>(int64_t(stream.size() - first), max_positions));
  const size_t per_chunk = size_t(ctx - 1);
  const size_t n_chunks = (n_score + per_chunk - 1) / per_chunk;

  std::vector<TokenComparison> results;
  results.reserve(n_score);
  for (size_t c = 0; c < n_chunks; ++c) {
    const size_t a = first + c * per_chunk;                      // first scored token of the chunk
    const size_t b = std::min(first + n_score, a + per_chunk);   // one past the last
    // input[i] predicts stream[a + i]: the context token, then stream[a .. b-1).
    std::vector<int32_t> input;
    input.push_back(bos >= 0 ? int32_t(bos) : stream[a - 1]);
    input.insert(input.end(), stream.begin() + std::ptrdiff_t(a), stream.begin() + std::ptrdiff_t(b - 1));
    const SeqId sb = base.engine->create(), st = test.engine->create();
    for (size_t p = 0; p < input.size(); p += kPiece) {
      const std::span<const int32_t> piece(input.data() + p, std::min(kPiece, input.size() - p));
      const StepInput ib{sb, piece, /*all_logits=*/true}, it{st, piece, /*all_logits=*/true};
      auto t0 = Clock::now();
      const std::vector<float> lb = std::move(base.engine->step(std::span<const StepInput>(&ib, 1))[0]);
      auto t1 = Clock::now();
      const std::vector<float> lt = std::move(test.engine->step(std::span<const StepInput>(&it, 1))[0]);
      auto t2 = Clock::now();
      base.seconds += std::chrono::duration<double>(t1 - t0).count();
      test.seconds += std::chrono::duration<double>(t2 - t1).count();
      for (size_t i = 0; i < piece.size(); ++i) {
        const std::span<const float> rb(lb.data() + i * size_t(vocab), size_t(vocab));
        const std::span<const float> rt(lt.data() + i * size_t(vocab), size_t(vocab));
        results.push_back(compare_logits(rb, rt, stream[a + p + i]));
      }
    }
    base.engine->release(sb);
    test.engine->release(st);
    if (!json)
      std::fprintf(stderr, "[kld] chunk %zu/%zu: %zu positions (%zu done)\n", c + 1, n_chunks, b - a,
                   results.size());
  }

  const KlSummary s = summarize_comparisons(results);
  if (json) {
    nlohmann::json j = {
        {"model", dir},
        {"text", text_path},
        {"text_tokens", stream.size()},
        {"positions", s.positions},
        {"chunks", n_chunks},
        {"ctx", ctx},
        {"base", side_json(base, s.ppl_base)},
        {"test", side_json(test, s.ppl_test)},
        {"kld",
         {{"mean", s.kl.mean},
          {"stderr", s.kl.error},
          {"min", s.kl_min},
          {"median", s.kl_median},
          {"p90", s.kl_p90},
          {"p95", s.kl_p95},
          {"p99", s.kl_p99},
          {"p99_9", s.kl_p999},
          {"max", s.kl_max}}},
        {"ln_ppl_ratio", {{"mean", s.ln_ppl_ratio.mean}, {"stderr", s.ln_ppl_ratio.error}}},
        {"same_top", s.same_top},
        {"same_top_fraction", s.same_top_fraction},
        {"delta_p", {{"mean", s.delta_p.mean}, {"stderr", s.delta_p.error}, {"rms", s.rms_delta_p}}},
    };
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("model %s, text %s: %lld positions in %zu chunk%s of up to %lld tokens\n", dir.c_str(),
              text_path.c_str(), (long long)s.positions, n_chunks, n_chunks == 1 ? "" : "s", (long long)ctx);
  for (const Side* side : {&base, &test})
    std::printf("%-5s: %s, --moe-backend %s (%s), --linear-backend %s (%s); %.2f s\n", side == &base ? "base" : "test",
                side->engine->device().c_str(), side->moe_flag.c_str(), side->engine->kernels("moe").c_str(),
                side->linear_flag.c_str(), side->engine->kernels("linear").c_str(), side->seconds);
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("PPL(base)                   : %12.6f\n", s.ppl_base);
  std::printf("PPL(test)                   : %12.6f\n", s.ppl_test);
  std::printf("Mean ln(PPL(test)/PPL(base)): %12.6f +- %.6f\n", s.ln_ppl_ratio.mean, s.ln_ppl_ratio.error);
  std::printf("\n====== KL divergence statistics (nats) ======\n");
  std::printf("Mean    KLD: %12.6f +- %.6f\n", s.kl.mean, s.kl.error);
  std::printf("Maximum KLD: %12.6f\n", s.kl_max);
  std::printf("99.9%%   KLD: %12.6f\n", s.kl_p999);
  std::printf("99.0%%   KLD: %12.6f\n", s.kl_p99);
  std::printf("95.0%%   KLD: %12.6f\n", s.kl_p95);
  std::printf("90.0%%   KLD: %12.6f\n", s.kl_p90);
  std::printf("Median  KLD: %12.6f\n", s.kl_median);
  std::printf("Minimum KLD: %12.6f\n", s.kl_min);
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    dp : %+11.6f %% +- %.6f %%\n", 100 * s.delta_p.mean, 100 * s.delta_p.error);
  std::printf("RMS     dp : %11.6f %%\n", 100 * s.rms_delta_p);
  std::printf("Same top   : %11.6f %% (%lld of %lld)\n", 100 * s.same_top_fraction, (long long)s.same_top,
              (long long)s.positions);
  return 0;
}

RegisterCommand reg({"kld", "KL divergence of a kernel configuration's next-token distributions vs the reference",
                     run_kld});

}  // namespace
}  // namespace nibble::cli
