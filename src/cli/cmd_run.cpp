// `nibble run [MODEL_DIR] -p PROMPT`: one completion, streamed to stdout.
// The prompt is raw text after BOS (a completion), or with --chat / --think
// one user message in the model's chat format (tokenizer/chat_format.h). Speed goes to stderr.
// Ctrl-C stops generation; the timing and stop line are still printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "cli/interrupt.h"
#include "cli/text_generation.h"
#include "cli/usage_error.h"
#include "tokenizer/chat_format.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"-p,--prompt", "TEXT", "the prompt; - reads it from stdin (this or --file is required)"},
      {"-f,--file", "FILE", "read the prompt from FILE (no size limit, unlike an argument)"},
      {"--chat", "", "send the prompt as a user message (the model's chat format, non-thinking mode)"},
      {"--think", "", "like --chat, in thinking mode (the reply starts with its reasoning; gpt-oss always reasons)"},
      {"--no-bos", "", "raw prompts: do not start with the BOS token"},
      {"--json", "", "print one JSON object at the end (ids, text, stop reason, timings) instead of streaming"},
      {"--n-probs", "N", "with --json: each token's log-probability and the N most likely alternatives (default 0)"},
      {"--tokens", "IDS", "the prompt as comma-separated token ids instead of text (no tokenizer needed); "
                          "prints the generated ids (a stop token that ends it included)"},
  };
  for (auto& spec : text_generation_options()) o.push_back(spec);
  return o;
}

std::string read_all(std::istream& in, const std::string& what) {
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) fail("cannot read the prompt from ", what);
  return s.str();
}

// -p TEXT, -p - (stdin) or -f FILE; exactly one of them.
std::string prompt_arg(const ParsedArgs& args, const std::string& usage) {
  if (args.has("--prompt") && args.has("--file")) usage_fail("give -p/--prompt or -f/--file, not both");
  if (args.has("--file")) {
    const std::string path = args.str("--file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("--file: cannot open ", path);
    return read_all(in, path);
  }
  if (!args.has("--prompt")) usage_fail("--prompt or --file is required (usage: ", usage, ")");
  if (args.str("--prompt") == "-") return read_all(std::cin, "stdin");
  return args.str("--prompt");
}

// What --json reports per generated token.
struct TokenLogprobs {
  int32_t id = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // most likely first
};

// log-softmax of the distribution the sampler drew from (the model's logits
// with penalties, before temperature and filters, as vLLM reports them).
TokenLogprobs logprobs_of(const float* logits, int64_t vocab, int32_t chosen, int64_t n_top) {
  double max = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_z = max + std::log(sum);
  TokenLogprobs t;
  t.id = chosen;
  t.logprob = double(logits[chosen]) - log_z;
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) ids[size_t(i)] = int32_t(i);
  const size_t k = size_t(std::min<int64_t>(n_top, vocab));
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) t.top.push_back({ids[i], double(logits[ids[i]]) - log_z});
  return t;
}

nlohmann::json completion_json(const TextModel& tm, const std::vector<int32_t>& prompt, const Completion& c,
                               const std::vector<TokenLogprobs>& probs, bool with_probs) {
  using nlohmann::json;
  const GenerationResult& r = c.result;
  const std::string reason = c.interrupted ? "interrupted"
                             : !c.stop_string.empty() ? "stop_string"
                             : c.context_cap          ? "context_full"
                                                      : finish_reason_name(r.reason);
  const int64_t steps = r.tokens.empty() ? 0 : int64_t(r.tokens.size()) - 1;
  json j = {
      {"model", tm.dir},
      {"prompt_tokens", prompt},
      {"tokens", r.tokens},
      {"text", c.text},
      {"stop_reason", reason},
      {"stop_string", c.stop_string.empty() ? json(nullptr) : json(c.stop_string)},
      {"timings",
       {{"load_s", tm.load_seconds},
        {"prefill_s", r.prefill_seconds},
        {"decode_s", r.decode_seconds},
        {"prefill_tokens_per_s", r.prefill_seconds > 0 ? double(r.prompt_tokens) / r.prefill_seconds : 0.0},
        {"decode_tokens_per_s", steps > 0 && r.decode_seconds > 0 ? double(steps) / r.decode_seconds : 0.0}}},
  };
  if (with_probs) {
    json list = json::array();
    for (const auto& t : probs) {
      json top = json::array();
      for (const auto& [id, lp] : t.top)
        top.push_back({{"id", id}, {"token", tm.tokenizer.token_bytes(id)}, {"logprob", lp}});
      list.push_back({{"id", t.id}, {"token", tm.tokenizer.token_bytes(t.id)}, {"logprob", t.logprob}, {"top", top}});
    }
    j["logprobs"] = list;
  }
  return j;
}

// --tokens 1,2,3: "0,17,42" as ids, each in [0, INT32_MAX].
std::vector<int32_t> token_ids_arg(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      usage_fail("--tokens: '", item, "' (entry ", out.size(), ") is not a token id");
    out.push_back(int32_t(v));
  }
  if (out.empty() || s.back() == ',') usage_fail("--tokens: give comma-separated token ids, e.g. 0,17,42");
  return out;
}

// run --tokens: ids in, ids out, no tokenizer (a model folder without
// tokenizer.json, e.g. a test fixture or a benchmark checkpoint).
int run_ids(const ParsedArgs& args, const std::string& usage) {
  for (const char* f : {"--prompt", "--file", "--chat", "--think", "--json", "--n-probs", "--stop"})
    if (args.has(f)) usage_fail("--tokens gives the prompt as ids; it does not combine with ", f);
  const std::vector<int32_t> ids = token_ids_arg(args.str("--tokens"));
  TextModel tm = load_text_model(args, usage, /*with_tokenizer=*/false);
  for (int32_t id : ids)
    if (id >= tm.engine->vocab_size())
      usage_fail("--tokens: id ", id, " is outside the model's vocabulary of ", tm.engine->vocab_size());
  const GenerationParams gen = fit_to_context(generation_options(args, tm), tm, 0, int64_t(ids.size()));
  install_interrupt_handler();
  const SeqId seq = tm.engine->create();
  size_t shown = 0;
  auto show = [&](int32_t id) {
    std::printf("%s%d", shown++ ? "," : "", id);
    std::fflush(stdout);
  };
  Completion c;
  c.result = tm.engine->generate(seq, ids, gen, [&](int32_t id) {
    show(id);
    return !interrupted();
  });
  // The stop token that ended it is not streamed; as ids it is shown too.
  for (size_t i = shown; i < c.result.tokens.size(); ++i) show(c.result.tokens[i]);
  c.interrupted = interrupted();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_generation_stats(c, tm.load_seconds);
  return c.interrupted ? 130 : 0;
}

int run_run(const std::vector<std::string>& argv) {
  const auto specs = options();
  ParsedArgs args = parse_args(argv, specs);
  const std::string usage = "nibble run [MODEL_DIR] -p PROMPT|-f FILE [-n N] [--temp T] [--seed S] [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Generates a continuation of PROMPT and streams it to stdout. Without\n"
                             "MODEL_DIR it runs the small model shipped with nibble (models/dsv4-tiny).\n"
                             "Load time, speed and the stop reason go to stderr. Ctrl-C stops early.\n"
                             "\n"
                             "Exit status: 0 done, 1 error, 2 bad usage, 130 stopped by Ctrl-C.",
                             specs);
    return 0;
  }
  if (args.has("--tokens")) return run_ids(args, usage);
  const std::string prompt = prompt_arg(args, usage);
  TextModel tm = load_text_model(args, usage);
  GenerationParams gen = generation_options(args, tm);

  std::vector<int32_t> ids;
  ReplyView view;
  if (args.has("--chat") || args.has("--think")) {
    ChatMessage user;
    user.role = ChatRole::User;
    user.content = prompt;
    ChatOptions co;
    co.mode = args.has("--think") ? ThinkingMode::Thinking : ThinkingMode::Chat;
    const auto format = chat_format_of(tm);
    ids = format->encode(std::span<const ChatMessage>(&user, 1), co);
    for (int32_t t : format->stop_tokens()) gen.stop_tokens.push_back(t);
    view = reply_view_for(*format);
  } else {
    if (!args.has("--no-bos") && tm.engine->bos_token_id() >= 0) ids.push_back(int32_t(tm.engine->bos_token_id()));
    tm.tokenizer.encode(prompt, /*allow_special=*/true, ids);
  }
  if (ids.empty()) fail("--prompt: the prompt encodes to no tokens (give text, or drop --no-bos)");
  const GenerationParams fitted = fit_to_context(gen, tm, 0, int64_t(ids.size()));

  const bool json = args.has("--json");
  const int64_t n_probs = args.integer("--n-probs", 0, 0, 1000);
  if (args.has("--n-probs") && !json) usage_fail("--n-probs needs --json");
  std::vector<TokenLogprobs> probs;
  GenerationParams run_gen = fitted;
  if (json && args.has("--n-probs"))
    run_gen.observe = [&](const float* logits, int64_t vocab, int32_t chosen) {
      probs.push_back(logprobs_of(logits, vocab, chosen, n_probs));
    };

  install_interrupt_handler();
  const SeqId seq = tm.engine->create();
  Completion c = stream_completion(tm, seq, ids, run_gen, args.list("--stop"), json ? nullptr : stdout, view);
  c.context_cap = fitted.max_new_tokens < gen.max_new_tokens && c.result.reason == FinishReason::max_tokens &&
                  c.stop_string.empty();
  if (json)
    std::cout << completion_json(tm, ids, c, probs, args.has("--n-probs"))
                     .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace)
              << "\n";
  else
    std::fputs("\n", stdout);
  std::fflush(stdout);
  print_generation_stats(c, tm.load_seconds);
  return c.interrupted ? 130 : 0;
}

RegisterCommand reg({"run", "generate a completion for a prompt (streams text)", run_run});

}  // namespace
}  // namespace nibble::cli
