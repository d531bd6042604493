#include "cli/text_generation.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/interrupt.h"
#include "cli/load_flags.h"
#include "cli/usage_error.h"
#include "convert/progress.h"
#include "runtime/stop_strings.h"
#include "tokenizer/harmony_reply.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"

namespace nibble::cli {

namespace fs = std::filesystem;

std::string shipped_model_dir() {
  // An installed binary (PREFIX/bin/nibble) finds the model that `cmake
  // --install` put in PREFIX/share/nibble; a binary in the build tree finds
  // the source tree's copy.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share/nibble/models/dsv4-tiny";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny";
}

std::vector<OptionSpec> text_generation_options() {
  std::vector<OptionSpec> o = {
      {"-n,--max-tokens", "N", "most tokens to generate; -1 = until end of text or context (default 128)"},
      {"-c,--ctx-size", "N", "cap the sequence (prompt + reply, or the conversation) at N tokens (default: the model's)"},
      {"--temp", "T", "sampling temperature; 0 = greedy (default: generation_config.json, else 1.0)"},
      {"--top-k", "K", "keep the K most likely tokens; 0 = off (default: generation_config.json, else 0)"},
      {"--top-p", "P", "nucleus sampling mass (default: generation_config.json, else 1.0)"},
      {"--min-p", "P", "drop tokens below P * the top probability (default: generation_config.json, else 0)"},
      {"--repeat-penalty", "R",
       "penalise tokens already in the sequence, as transformers' repetition_penalty; 1 = off "
       "(default: generation_config.json, else 1)"},
      {"--presence-penalty", "P", "subtract P from the logit of every token generated so far, in [-2, 2] (default 0)"},
      {"--frequency-penalty", "F", "subtract F x its count from every generated token's logit, in [-2, 2] (default 0)"},
      {"--seed", "S", "sampling seed; -1 = a random one, printed (default 0)"},
      {"--stop", "TEXT", "end the text before TEXT when it is generated (repeatable)"},
      {"--spec-draft-tokens", "K",
       "speculative decoding with the model's MTP layer, K drafts per step, 1..15 (default 0 = off; "
       "docs/speculative.md)"},
      {"--no-spec", "", "no speculative decoding (the default)"},
  };
  for (auto& spec : model_load_options()) o.push_back(spec);
  return o;
}

TextModel load_text_model(const ParsedArgs& args, const std::string& usage, bool with_tokenizer) {
  TextModel tm;
  tm.dir = model_dir_arg(args, /*shipped_default=*/true, usage);
  EngineOptions opt = engine_options(args);
  opt.load_tokenizer = false;  // the CLI loads its own (below)
  // A bar on a terminal while a large model binds and checks its weights
  // (seconds for a full-size checkpoint); nothing for small ones or in logs.
  ProgressBar bar(stderr, load_progress_mode());
  show_load_progress(opt, bar);
  const int64_t ctx_flag = args.integer("--ctx-size", 0, 1, int64_t(1) << 40);
  const auto t0 = std::chrono::steady_clock::now();
  // The tokenizer first: a text command without one fails before the
  // weights load, and sampling stays within the ids it has text for.
  if (with_tokenizer) {
    if (Tokenizer::file_in(tm.dir).empty())
      fail(tm.dir, ": no tokenizer.json or tiktoken.model (text commands need one; `nibble run --tokens IDS` and "
                   "`nibble logits` do not)");
    tm.tokenizer = Tokenizer::from_model_dir(tm.dir);
    opt.sample_vocab = int64_t(tm.tokenizer.vocab_size());
  }
  tm.engine = Engine::load(tm.dir, opt);
  bar.finish();
  tm.context = tm.engine->max_context();
  if (ctx_flag > 0) {
    if (ctx_flag > tm.context)
      std::fprintf(stderr, "[nibble] -c/--ctx-size %lld is more than the model's context; using its %lld tokens\n",
                   (long long)ctx_flag, (long long)tm.context);
    tm.context = std::min(tm.context, ctx_flag);
  }
  tm.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (with_tokenizer && int64_t(tm.tokenizer.vocab_size()) > tm.engine->vocab_size())
    fail(tm.tokenizer.path(), ": the tokenizer has ", tm.tokenizer.vocab_size(),
         " ids but the model's vocab_size is ", tm.engine->vocab_size());
  return tm;
}

std::unique_ptr<ChatFormat> chat_format_of(const TextModel& tm) {
  const Tokenizer* tok = &tm.tokenizer;
  return chat_format_for(tm.engine->architecture(),
                         [tok](const std::string& text, bool allow_special) { return tok->encode(text, allow_special); });
}

ReplyView reply_view_for(const ChatFormat& format) {
  if (format.kind() != ChatFormatKind::Harmony) return nullptr;
  auto view = std::make_shared<HarmonyTextView>();
  return [view](std::string_view piece, bool at_end) {
    std::string out = view->push(piece);
    if (at_end) out += view->finish();
    return out;
  };
}

GenerationParams generation_options(const ParsedArgs& args, const TextModel& tm) {
  // Flags over generation_config.json over the model card. The file was
  // validated when the model loaded (naming its fields), before any flag here.
  const GenerationDefaults& d = tm.engine->generation_defaults();
  GenerationParams o;
  o.stop_tokens = d.stop_tokens;
  const int64_t n = args.integer("--max-tokens", 128, -1, int64_t(1) << 40);
  o.max_new_tokens = n < 0 ? tm.context : n;
  SamplingParams& s = o.sampling;
  s.temperature = float(args.number("--temp", d.sampling.temperature, 0, 1e6));
  s.top_k = args.integer("--top-k", d.sampling.top_k, 0, int64_t(1) << 30);
  s.top_p = float(args.number("--top-p", d.sampling.top_p, 1e-9, 1));
  s.min_p = float(args.number("--min-p", d.sampling.min_p, 0, 1));
  s.repetition_penalty = float(args.number("--repeat-penalty", d.sampling.repetition_penalty, 1e-6, 1e6));
  s.presence_penalty = float(args.number("--presence-penalty", 0, -2, 2));
  s.frequency_penalty = float(args.number("--frequency-penalty", 0, -2, 2));
  const int64_t seed = args.integer("--seed", 0, -1, INT64_MAX);
  if (seed < 0) {
    std::random_device rd;
    s.seed = ((uint64_t(rd()) << 32) | rd()) & uint64_t(INT64_MAX);
    std::fprintf(stderr, "[nibble] seed %llu (--seed %llu repeats this run)\n", (unsigned long long)s.seed,
                 (unsigned long long)s.seed);
  } else {
    s.seed = uint64_t(seed);
  }
  o.draft_tokens = args.has("--no-spec") ? 0 : args.integer("--spec-draft-tokens", 0, 0, 15);
  if (o.draft_tokens > 0)
    if (const std::string why = tm.engine->draft_unavailable(); !why.empty())
      fail("--spec-draft-tokens ", o.draft_tokens, ": speculative decoding needs the model's MTP layer: ", why);
  return o;
}

GenerationParams fit_to_context(const GenerationParams& gen, const TextModel& tm, int64_t position,
                                int64_t prompt_tokens) {
  const int64_t left = tm.context - position - prompt_tokens;
  if (left < 0)
    fail("the prompt has ", prompt_tokens, " tokens but ", tm.context - position, " of the ",
         tm.context < tm.engine->max_context() ? "-c/--ctx-size " : "model's ", tm.context,
         "-token context are left");
  GenerationParams o = gen;
  o.max_new_tokens = std::min(o.max_new_tokens, left);
  return o;
}

Completion stream_completion(const TextModel& tm, SeqId seq, std::span<const int32_t> prompt,
                             const GenerationParams& gen, const std::vector<std::string>& stop_strings,
                             std::FILE* out, const ReplyView& view) {
  Completion c;
  StreamDecoder decoder(tm.tokenizer);
  StopStrings stops(stop_strings);
  // repetition_penalty covers everything the sequence holds (the Engine
  // keeps its tokens): the prompt, or in chat the whole conversation.
  auto show = [&](const std::string& raw, bool at_end = false) {
    c.text += raw;
    if (!out) return;
    const std::string piece = view ? view(raw, at_end) : raw;
    if (piece.empty()) return;
    errno = 0;
    if (std::fputs(piece.c_str(), out) < 0 || std::fflush(out) != 0 || std::ferror(out))
      fail("writing the generated text to ", out == stdout ? "stdout" : "the output", " failed",
           errno ? ": " : "", errno ? std::strerror(errno) : "");
  };
  // A long prompt is fed here in pieces, all but its last kPrefillPiece
  // tokens, so that Ctrl-C can stop between them (generate() feeds its
  // prompt in one call). Logits do not depend on how a prompt is split
  // into steps (the Engine's batch invariance).
  constexpr size_t kPrefillPiece = 256;
  size_t fed = 0;
  double fed_seconds = 0;
  if (prompt.size() > 2 * kPrefillPiece) {
    const auto t0 = std::chrono::steady_clock::now();
    while (prompt.size() - fed > kPrefillPiece && !interrupted()) {
      const size_t n = std::min(kPrefillPiece, prompt.size() - fed - kPrefillPiece);
      const StepInput in{seq, prompt.subspan(fed, n), /*all_logits=*/false, /*want_logits=*/false};
      tm.engine->step(std::span<const StepInput>(&in, 1));
      fed += n;
    }
    fed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (interrupted()) {
      c.interrupted = true;
      c.result.reason = FinishReason::callback;
      c.result.prompt_tokens = int64_t(fed);
      c.result.prefill_seconds = fed_seconds;
      return c;
    }
  }
  c.result = tm.engine->generate(seq, prompt.subspan(fed), gen, [&](int32_t id) {
    show(stops.push(decoder.push(id)));
    if (interrupted()) c.interrupted = true;
    return !stops.stopped() && !c.interrupted;
  });
  c.result.prompt_tokens += int64_t(fed);
  c.result.prefill_seconds += fed_seconds;
  show(stops.push(decoder.finish()));
  show(stops.finish(), /*at_end=*/true);
  c.stop_string = stops.matched();
  return c;
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

void print_generation_stats(const Completion& c, double load_seconds) {
  const GenerationResult& r = c.result;
  // The first token comes from the prompt's forward; each later one costs one decode step.
  const int64_t steps = r.tokens.empty() ? 0 : int64_t(r.tokens.size()) - 1;
  std::fprintf(stderr, "[nibble] ");
  if (load_seconds > 0) std::fprintf(stderr, "load %.3f s; ", load_seconds);
  std::fprintf(stderr, "prompt %lld tokens in %.3f s (%.1f tok/s); generated %lld tokens, %lld decode steps in %.3f s",
               (long long)r.prompt_tokens, r.prefill_seconds,
               r.prefill_seconds > 0 ? double(r.prompt_tokens) / r.prefill_seconds : 0.0, (long long)r.tokens.size(),
               (long long)steps, r.decode_seconds);
  if (steps > 0 && r.decode_seconds > 0) std::fprintf(stderr, " (%.1f tok/s)", double(steps) / r.decode_seconds);
  if (r.spec.steps > 0) {
    std::fprintf(stderr, "; speculative: %lld verify steps, accepted per draft position", (long long)r.spec.steps);
    for (size_t j = 0; j < r.spec.drafted.size(); ++j)
      std::fprintf(stderr, " %lld/%lld", (long long)r.spec.accepted[j], (long long)r.spec.drafted[j]);
    std::fprintf(stderr, ", mean accepted length %.2f", r.spec.mean_accepted_length());
  }
  if (c.interrupted)
    std::fprintf(stderr, "; stop: interrupted (Ctrl-C)\n");
  else if (!c.stop_string.empty())
    std::fprintf(stderr, "; stop: stop_string %s\n", quoted(c.stop_string).c_str());
  else if (c.context_cap)
    std::fprintf(stderr, "; stop: context_full\n");
  else
    std::fprintf(stderr, "; stop: %s\n", finish_reason_name(r.reason));
}

}  // namespace nibble::cli
