#include "cli/text_generation.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "model/registry.h"
#include "runtime/stop_strings.h"
#include "tokenizer/stream_decoder.h"
#include "util/error.h"

namespace nibble::cli {

std::string shipped_model_dir() { return std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny"; }

std::vector<OptionSpec> text_generation_options() {
  return {
      {"-n,--max-tokens", "N", "most tokens to generate (default 128)"},
      {"--temp", "T", "sampling temperature; 0 = greedy (default: generation_config.json, else 1.0)"},
      {"--top-k", "K", "keep the K most likely tokens; 0 = off (default: generation_config.json, else 0)"},
      {"--top-p", "P", "nucleus sampling mass (default: generation_config.json, else 1.0)"},
      {"--min-p", "P", "drop tokens below P * the top probability (default 0)"},
      {"--seed", "S", "sampling seed (default 0)"},
      {"--stop", "TEXT", "end the text before TEXT when it is generated (repeatable)"},
      {"--threads", "N", "CPU threads (default: all)"},
      {"--moe-backend", "NAME", "force the routed-experts kernel (default auto)"},
      {"--linear-backend", "NAME", "force the kernel of the other matrix ops (default auto)"},
      {"--bandwidth", "GBPS", "memory bandwidth the planner assumes (default: measured at start)"},
      {"--no-check-weights", "", "skip the load-time check for NaN scale codes in the weights"},
  };
}

TextModel load_text_model(const ParsedArgs& args) {
  if (args.positional.size() > 1) fail("expected at most one MODEL_DIR, got ", args.positional.size(), " arguments");
  TextModel tm;
  if (args.positional.empty()) {
    tm.dir = shipped_model_dir();
    if (!std::filesystem::exists(tm.dir))
      fail("no MODEL_DIR given and the shipped model ", tm.dir, " is missing");
  } else {
    tm.dir = args.positional[0];
  }
  LoadOptions opt;
  opt.threads = int(args.integer("--threads", 0, 0, 4096));
  opt.plan.moe_backend = args.str("--moe-backend", "auto");
  opt.plan.linear_backend = args.str("--linear-backend", "auto");
  opt.bandwidth_gbps = args.number("--bandwidth", 0, 0.001, 1e6);  // 0: measure
  opt.skip_weight_check = args.has("--no-check-weights");
  tm.model = load_model(tm.dir, opt);
  const std::string tok_path = tm.dir + "/tokenizer.json";
  if (!std::filesystem::exists(tok_path)) fail(tm.dir, ": no tokenizer.json (text commands need one; `nibble logits` does not)");
  tm.tokenizer = Tokenizer::from_file(tok_path);
  if (int64_t(tm.tokenizer.vocab_size()) > tm.model->vocab_size())
    fail(tok_path, ": the tokenizer has ", tm.tokenizer.vocab_size(), " ids but the model's vocab_size is ",
         tm.model->vocab_size());
  return tm;
}

GenerateOptions generation_options(const ParsedArgs& args, const TextModel& tm) {
  // Defaults: generation_config.json, else the model card (temperature 1, top_p 1).
  double temp = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  GenerateOptions o;
  const std::string gc_path = tm.dir + "/generation_config.json";
  if (std::filesystem::exists(gc_path)) {
    const nlohmann::json gc = read_json_file(gc_path);
    auto num = [&](const char* key, double fallback) {
      auto it = gc.find(key);
      return it != gc.end() && it->is_number() ? it->get<double>() : fallback;
    };
    temp = num("temperature", temp);
    top_p = num("top_p", top_p);
    top_k = int64_t(num("top_k", double(top_k)));
    if (auto it = gc.find("do_sample"); it != gc.end() && it->is_boolean() && !it->get<bool>()) temp = 0;
    // Its eos_token_id (an id or a list) stops generation too, alongside
    // config.json's (GenerateOptions::use_model_eos).
    if (auto it = gc.find("eos_token_id"); it != gc.end() && !it->is_null()) {
      const nlohmann::json ids = it->is_array() ? *it : nlohmann::json::array({*it});
      for (const auto& id : ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tm.model->vocab_size())
          fail(gc_path, ": eos_token_id must be a token id in [0, ", tm.model->vocab_size(),
               ") or a list of them, got ", it->dump());
        o.stop_tokens.push_back(id.get<int64_t>());
      }
    }
  }
  o.max_new_tokens = args.integer("--max-tokens", 128, 0, int64_t(1) << 30);
  o.sampler.temperature = float(args.number("--temp", temp, 0, 1e6));
  o.sampler.top_k = args.integer("--top-k", top_k, 0, int64_t(1) << 30);
  o.sampler.top_p = float(args.number("--top-p", top_p, 1e-9, 1));
  o.sampler.min_p = float(args.number("--min-p", 0, 0, 1));
  o.sampler.seed = uint64_t(args.integer("--seed", 0, 0, INT64_MAX));
  return o;
}

Completion stream_completion(const TextModel& tm, Session& session, std::span<const int32_t> prompt,
                             const GenerateOptions& gen, const std::vector<std::string>& stop_strings,
                             std::FILE* out) {
  Completion c;
  StreamDecoder decoder(tm.tokenizer);
  StopStrings stops(stop_strings);
  auto show = [&](const std::string& piece) {
    c.text += piece;
    std::fputs(piece.c_str(), out);
    std::fflush(out);
  };
  c.result = generate(session, prompt, gen, [&](int32_t id) {
    show(stops.push(decoder.push(id)));
    return !stops.stopped();
  });
  show(stops.push(decoder.finish()));
  show(stops.finish());
  c.stop_string = stops.matched();
  return c;
}

void print_generation_stats(const Completion& c) {
  const GenerateResult& r = c.result;
  // The first token comes from the prompt's forward; each later one costs one decode step.
  const int64_t steps = r.tokens.empty() ? 0 : int64_t(r.tokens.size()) - 1;
  std::fprintf(stderr, "[nibble] prompt %lld tokens in %.3f s (%.1f tok/s); generated %lld tokens, %lld decode steps in %.3f s",
               (long long)r.prompt_tokens, r.prefill_seconds,
               r.prefill_seconds > 0 ? double(r.prompt_tokens) / r.prefill_seconds : 0.0, (long long)r.tokens.size(),
               (long long)steps, r.decode_seconds);
  if (steps > 0 && r.decode_seconds > 0) std::fprintf(stderr, " (%.1f tok/s)", double(steps) / r.decode_seconds);
  if (!c.stop_string.empty())
    std::fprintf(stderr, "; stop: stop_string \"%s\"\n", c.stop_string.c_str());
  else
    std::fprintf(stderr, "; stop: %s\n", stop_reason_name(r.reason));
}

}  // namespace nibble::cli
