// `nibble run [MODEL_DIR] -p PROMPT`: one completion, streamed to stdout.
// The prompt is raw text after BOS (a completion), or with --chat / --think
// one user message in DeepSeek-V4's chat encoding. Speed goes to stderr.
// Ctrl-C stops generation; the timing and stop line are still printed.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "cli/interrupt.h"
#include "cli/text_generation.h"
#include "cli/usage_error.h"
#include "tokenizer/chat_dsv4.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"-p,--prompt", "TEXT", "the prompt; - reads it from stdin (this or --file is required)"},
      {"-f,--file", "FILE", "read the prompt from FILE (no size limit, unlike an argument)"},
      {"--chat", "", "send the prompt as a user message (chat encoding, non-thinking mode)"},
      {"--think", "", "like --chat, in thinking mode (the reply starts with its reasoning)"},
      {"--no-bos", "", "raw prompts: do not start with the BOS token"},
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
  const std::string prompt = prompt_arg(args, usage);
  TextModel tm = load_text_model(args, usage);
  GenerateOptions gen = generation_options(args, tm);

  std::vector<int32_t> ids;
  if (args.has("--chat") || args.has("--think")) {
    ChatMessage user;
    user.role = ChatRole::User;
    user.content = prompt;
    ChatEncodeOptions co;
    co.mode = args.has("--think") ? ThinkingMode::Thinking : ThinkingMode::Chat;
    ids = tm.tokenizer.encode(encode_dsv4_chat(std::span<const ChatMessage>(&user, 1), co));
  } else {
    if (!args.has("--no-bos") && tm.model->bos_token_id() >= 0) ids.push_back(int32_t(tm.model->bos_token_id()));
    tm.tokenizer.encode(prompt, /*allow_special=*/true, ids);
  }
  if (ids.empty()) fail("--prompt: the prompt encodes to no tokens (give text, or drop --no-bos)");
  const GenerateOptions fitted = fit_to_context(gen, tm, 0, int64_t(ids.size()));

  install_interrupt_handler();
  Session session(*tm.model);
  Completion c = stream_completion(tm, session, ids, fitted, args.list("--stop"), stdout);
  c.context_cap = fitted.max_new_tokens < gen.max_new_tokens && c.result.reason == StopReason::max_tokens &&
                  c.stop_string.empty();
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_generation_stats(c, tm.load_seconds);
  return c.interrupted ? 130 : 0;
}

RegisterCommand reg({"run", "generate a completion for a prompt (streams text)", run_run});

}  // namespace
}  // namespace nibble::cli
