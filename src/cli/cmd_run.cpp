// `nibble run [MODEL_DIR] -p PROMPT`: one completion, streamed to stdout.
// The prompt is raw text after BOS (a completion), or with --chat / --think
// one user message in DeepSeek-V4's chat encoding. Speed goes to stderr.
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/text_generation.h"
#include "tokenizer/chat_dsv4.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"-p,--prompt", "TEXT", "the prompt (required)"},
      {"--chat", "", "send the prompt as a user message (chat encoding, non-thinking mode)"},
      {"--think", "", "like --chat, in thinking mode (the reply starts with its reasoning)"},
      {"--no-bos", "", "raw prompts: do not start with the BOS token"},
  };
  for (auto& spec : text_generation_options()) o.push_back(spec);
  return o;
}

int run_run(const std::vector<std::string>& argv) {
  const auto specs = options();
  ParsedArgs args = parse_args(argv, specs);
  const std::string usage = "nibble run [MODEL_DIR] -p PROMPT [-n N] [--temp T] [--seed S] [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Generates a continuation of PROMPT and streams it to stdout. Without\n"
                             "MODEL_DIR it runs the small model shipped in the repository\n"
                             "(models/dsv4-tiny). Speed and the stop reason go to stderr.",
                             specs);
    return 0;
  }
  if (!args.has("--prompt")) fail("--prompt is required (usage: ", usage, ")");
  const std::string prompt = args.str("--prompt");
  TextModel tm = load_text_model(args);
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

  Session session(*tm.model);
  Completion c = stream_completion(tm, session, ids, gen, args.list("--stop"), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_generation_stats(c);
  return 0;
}

RegisterCommand reg({"run", "generate a completion for a prompt (streams text)", run_run});

}  // namespace
}  // namespace nibble::cli
