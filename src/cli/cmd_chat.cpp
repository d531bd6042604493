// `nibble chat [MODEL_DIR]`: a conversation on stdin/stdout. Each input line
// is a user message; the reply streams to stdout. Every turn encodes the
// whole conversation (the model's chat format, tokenizer/chat_format.h), exactly as a server that
// receives the message list would; when the tokens already in the caches are
// a prefix of it, only the rest is fed (usually the closing EOS of the last
// reply and the new user turn). Otherwise (thinking mode drops old
// reasoning; a reply that re-tokenizes differently) the caches start over.
// Either way the reply equals a fresh run over the conversation. Lines
// starting with '/' are commands (/help lists them); a line ending in '\'
// continues on the next one. A line that is not UTF-8 is refused and the
// conversation stays as it was. Ctrl-C stops a reply (what was generated is
// kept) and returns to the prompt; Ctrl-C at the prompt quits.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "cli/interrupt.h"
#include "cli/line_reader.h"
#include "cli/text_generation.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"--system", "TEXT", "a system prompt"},
      {"--think", "", "thinking mode (replies start with their reasoning; gpt-oss always reasons)"},
      {"--quiet", "", "no prompt marker and no speed line on stderr"},
  };
  for (auto& spec : text_generation_options()) o.push_back(spec);
  return o;
}

// The generated tokens without the stop token that ended them, if one did.
std::vector<int32_t> without_stop_token(const GenerationResult& r) {
  std::vector<int32_t> reply = r.tokens;
  if (r.reason == FinishReason::stop_token && !reply.empty()) reply.pop_back();
  return reply;
}

const char* kChatHelp =
    "commands:\n"
    "  /help    this list\n"
    "  /reset   start a new conversation (the system prompt stays)\n"
    "  /exit    quit (also end of input, or Ctrl-C at the prompt)\n"
    "end a line with \\ to continue the message on the next line; Ctrl-C stops a reply\n";

// One user message: lines ending in '\\' continue on the next (the
// backslash becomes a newline). False at end of input or Ctrl-C.
bool read_message(LineReader& in, std::string& message, bool quiet) {
  message.clear();
  std::string line;
  bool first = true;
  while (true) {
    if (interrupted()) return false;  // Ctrl-C just after a reply ended: at the prompt
    if (!in.read(quiet ? "" : first ? "> " : ". ", line)) return !message.empty() && !interrupted();
    if (interrupted()) return false;  // the line arrived together with a Ctrl-C
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      first = false;
      continue;
    }
    message += line;
    in.remember(message);
    return true;
  }
}

int run_chat(const std::vector<std::string>& argv) {
  const auto specs = options();
  ParsedArgs args = parse_args(argv, specs);
  const std::string usage = "nibble chat [MODEL_DIR] [--system TEXT] [--think] [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Chats on stdin/stdout: each line is a user message, the reply is\n"
                             "streamed back. Without MODEL_DIR it runs the model shipped with nibble.\n\n" +
                                 std::string(kChatHelp),
                             specs);
    return 0;
  }
  TextModel tm = load_text_model(args, usage);
  GenerationParams gen = generation_options(args, tm);
  const bool quiet = args.has("--quiet");
  if (!quiet)
    std::fprintf(stderr, "[nibble] loaded %s in %.3f s; /help lists the commands\n", tm.dir.c_str(), tm.load_seconds);
  install_interrupt_handler();
  ChatOptions co;
  co.mode = args.has("--think") ? ThinkingMode::Thinking : ThinkingMode::Chat;
  const auto format = chat_format_of(tm);
  for (int32_t t : format->stop_tokens()) gen.stop_tokens.push_back(t);
  const ReplyView view_of_format = reply_view_for(*format);

  std::vector<ChatMessage> messages;
  auto start = [&] {
    messages.clear();
    if (args.has("--system")) {
      ChatMessage sys;
      sys.role = ChatRole::System;
      sys.content = args.str("--system");
      messages.push_back(sys);
    }
  };
  start();
  SeqId seq = tm.engine->create();
  std::vector<int32_t> cached;  // the tokens the caches hold, in order

  LineReader reader(/*interactive=*/!quiet);
  std::string line;
  while (true) {
    if (!read_message(reader, line, quiet)) {
      if (interrupted() && !quiet) std::fputs("\n", stderr);
      break;
    }
    if (line == "/exit") break;
    if (line == "/help") {
      std::fputs(kChatHelp, stderr);
      continue;
    }
    if (line == "/reset") {
      start();
      tm.engine->release(seq);
      seq = tm.engine->create();
      cached.clear();
      continue;
    }
    if (line.empty()) continue;
    if (size_t bad = utf8_first_invalid(line); bad < line.size()) {
      // Refused before it joins the conversation: the next line goes on from
      // where the conversation was.
      std::fprintf(stderr, "[nibble] line refused: invalid UTF-8 at byte %zu of the line; the conversation is "
                   "unchanged\n", bad);
      continue;
    }
    ChatMessage user;
    user.role = ChatRole::User;
    user.content = line;
    messages.push_back(user);
    const std::vector<int32_t> ids = format->encode(messages, co);
    if (int64_t(ids.size()) > tm.context) {
      // Refused before anything runs: the conversation stays as it was.
      std::fprintf(stderr, "[nibble] the conversation would take %zu tokens but the context holds %lld; "
                   "'/reset' starts a new one\n", ids.size(), (long long)tm.context);
      messages.pop_back();
      continue;
    }

    const bool reuse = !cached.empty() && cached.size() < ids.size() &&
                       std::equal(cached.begin(), cached.end(), ids.begin());
    if (!reuse) {
      tm.engine->release(seq);
      seq = tm.engine->create();
      cached.clear();
    }
    const std::vector<int32_t> feed(ids.begin() + std::ptrdiff_t(cached.size()), ids.end());

    // --repeat-penalty covers the whole conversation: the sequence's tokens.
    GenerationParams turn = fit_to_context(gen, tm, int64_t(cached.size()), int64_t(feed.size()));
    // A fresh view per reply: it holds the reply's parse state.
    const ReplyView view = view_of_format ? reply_view_for(*format) : nullptr;
    Completion c = stream_completion(tm, seq, feed, turn, args.list("--stop"), stdout, view);
    c.context_cap = turn.max_new_tokens < gen.max_new_tokens && c.result.reason == FinishReason::max_tokens &&
                    c.stop_string.empty();
    const GenerationResult& r = c.result;
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (c.interrupted) {
      // The reply so far stays in the conversation, as shown.
      clear_interrupt();
      if (!quiet) std::fputs("[nibble] reply stopped (Ctrl-C); what was generated is kept\n", stderr);
    }
    if (!quiet) {
      print_generation_stats(c);
      std::fprintf(stderr, "[nibble] %s: %zu of %zu conversation tokens were already cached\n",
                   reuse ? "caches kept" : "caches rebuilt", ids.size() - feed.size(), ids.size());
    }
    cached.insert(cached.end(), feed.begin(), feed.end());
    if (!r.tokens.empty()) cached.insert(cached.end(), r.tokens.begin(), r.tokens.end() - 1);  // last one unfed

    // The reply joins the history as shown (cut at a stop string; its EOS is
    // written by the chat encoding).
    const std::string text =
        c.stop_string.empty() && !c.interrupted ? tm.tokenizer.decode(without_stop_token(r)) : c.text;
    ChatMessage assistant;
    assistant.role = ChatRole::Assistant;
    try {
      ParsedCompletion pc = format->parse(text, co);
      assistant.content = pc.content;
      if (format->reasons(co)) assistant.reasoning_content = pc.reasoning_content;
      assistant.tool_calls = pc.tool_calls;
    } catch (const Error&) {
      assistant.content = text;  // not well-formed chat output: keep it verbatim
    }
    messages.push_back(assistant);
  }
  return 0;
}

RegisterCommand reg({"chat", "chat with a model on stdin/stdout (multi-turn, caches kept)", run_chat});

}  // namespace
}  // namespace nibble::cli
