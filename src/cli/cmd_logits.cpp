// `nibble logits MODEL_DIR --tokens 1,2,3 --out FILE`: one full forward over
// the given token ids; writes raw little-endian f32 logits [n_tokens][vocab]
// (the format tests and comparison scripts read). The file appears complete
// or not at all: it is written under a temporary name and renamed. `--out -`
// writes to stdout instead.
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/args.h"
#include "cli/usage_error.h"
#include "cli/command.h"
#include "cli/load_flags.h"
#include "convert/progress.h"
#include "nibble/engine.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"--tokens", "IDS", "comma-separated token ids, e.g. 0,17,42 (required)"},
      {"--out", "FILE", "where to write the f32 logits [n_tokens][vocab]; - = stdout (required)"},
  };
  for (auto& spec : model_load_options()) o.push_back(spec);
  return o;
}

std::vector<int32_t> parse_tokens(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    if (item.empty()) usage_fail("--tokens: empty entry at position ", out.size(), " in '", s, "'");
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      usage_fail("--tokens: '", item, "' (entry ", out.size(), ") is not a token id");
    out.push_back(int32_t(v));
    i = j + 1;
  }
  return out;
}

int run_logits(const std::vector<std::string>& argv) {
  const auto kOptions = options();
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble logits MODEL_DIR --tokens IDS --out FILE [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Runs one forward pass over the token ids from position 0 and writes the\n"
                             "logits of every position as raw little-endian f32, [n_tokens][vocab].",
                             kOptions);
    return 0;
  }
  const std::string dir = model_dir_arg(args, /*shipped_default=*/false, usage);
  if (!args.has("--tokens")) usage_fail("--tokens is required (usage: ", usage, ")");
  if (!args.has("--out")) usage_fail("--out is required (usage: ", usage, ")");
  const std::vector<int32_t> tokens = parse_tokens(args.str("--tokens"));
  const std::string out_path = args.str("--out");
  if (out_path.empty()) usage_fail("--out: empty file name");

  EngineOptions opt = engine_options(args);
  opt.load_tokenizer = false;  // token ids in, logits out
  ProgressBar bar(stderr, load_progress_mode());
  show_load_progress(opt, bar);
  auto engine = Engine::load(dir, opt);
  bar.finish();

  const int64_t vocab = engine->vocab_size();
  const StepInput in{engine->create(), tokens, /*all_logits=*/true};
  const std::vector<float> logits = std::move(engine->step(std::span<const StepInput>(&in, 1))[0]);

  static_assert(std::endian::native == std::endian::little, "logits are written little-endian");
  if (out_path == "-") {
    // main() checks that stdout took it all.
    std::fwrite(logits.data(), sizeof(float), logits.size(), stdout);
    std::fprintf(stderr, "wrote %zu x %lld f32 logits to stdout\n", tokens.size(), (long long)vocab);
    return 0;
  }
  const std::string tmp = out_path + ".tmp-nibble";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("--out: cannot create ", tmp);
    f.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      fail("--out: cannot write ", tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail("--out: cannot rename ", tmp, " to ", out_path, ": ", ec.message());
  }
  std::fprintf(stderr, "wrote %zu x %lld f32 logits to %s\n", tokens.size(), (long long)vocab, out_path.c_str());
  return 0;
}

RegisterCommand reg({"logits", "write the f32 logits of a full forward over token ids (for comparisons)", run_logits});

}  // namespace
}  // namespace nibble::cli
