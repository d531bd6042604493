// `nibble serve [MODEL_DIR]`: the OpenAI-compatible HTTP server
// (src/server/, docs/server.md). Loads the model, listens, logs one line
// per request on stderr, and on SIGINT / SIGTERM stops accepting, cancels
// what is running and exits within a bounded time.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/command.h"
#include "cli/load_flags.h"
#include "cli/usage_error.h"
#include "nibble/engine.h"
#include "runtime/speculative.h"
#include "server/http_server.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

// Set by the signal handler, polled by the main thread (a handler may only
// touch lock-free atomics).
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// How long shutdown may take before the process exits anyway: streams end
// at their next write, idle keep-alive connections within httplib's poll.
constexpr auto kShutdownGrace = std::chrono::seconds(10);

std::vector<OptionSpec> options() {
  std::vector<OptionSpec> o = {
      {"--host", "ADDR", "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"},
      {"--port", "N", "TCP port (default 8080; 0 picks a free one, printed at start)"},
      {"--api-key", "KEY", "require this key (Authorization: Bearer KEY or X-Api-Key); /health stays open"},
      {"-np,--parallel", "N", "requests generating at once, one sequence each (default 4)"},
      {"--max-queue", "N", "requests waiting beyond those; more get 503 + Retry-After (default 64)"},
      {"-c,--ctx-size", "N", "tokens per sequence, prompt and reply (default: the model's)"},
      {"--alias", "NAME", "the model name /v1/models lists (default: the model folder's name)"},
      {"--cache-tokens", "N", "tokens kept for prefix reuse (prompts and finished replies, LRU); 0 = off (default 16384)"},
      {"--step-tokens", "N", "most tokens one engine step processes, decode and prefill chunks (default 256)"},
      {"--spec-draft-tokens", "K",
       "speculative decoding with the model's MTP layer, K drafts per sequence and step, 1..15, verified for all "
       "sequences in one batched step (default 0 = off; docs/speculative.md)"},
      {"--no-spec", "", "no speculative decoding (the default)"},
  };
  for (auto& spec : model_load_options()) o.push_back(spec);
  return o;
}

int run_serve(const std::vector<std::string>& argv) {
  const auto specs = options();
  ParsedArgs args = parse_args(argv, specs);
  const std::string usage = "nibble serve [MODEL_DIR] [--host ADDR] [--port N] [--api-key KEY] [options]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Serves the model over HTTP with OpenAI's API: /v1/chat/completions,\n"
                             "/v1/completions (streamed or not), /v1/models, /tokenize, /detokenize,\n"
                             "/health and /metrics. Requests are batched continuously: a new one joins\n"
                             "the running batch at the next engine step. Without MODEL_DIR it serves the\n"
                             "small model shipped with nibble (models/dsv4-tiny). One log line per\n"
                             "request goes to stderr; Ctrl-C or SIGTERM stops it.\n"
                             "\n"
                             "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
                             "    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 32}'\n"
                             "\n"
                             "Exit status: 0 stopped by a signal, 1 error, 2 bad usage.",
                             specs);
    return 0;
  }
  const std::string dir = model_dir_arg(args, /*shipped_default=*/true, usage);
  server::ServerOptions so;
  so.host = args.str("--host", "127.0.0.1");
  so.port = int(args.integer("--port", 8080, 0, 65535));
  so.api_key = args.str("--api-key", "");
  if (args.has("--api-key") && so.api_key.empty()) usage_fail("flag --api-key: the key is empty");
  so.parallel = int(args.integer("--parallel", 4, 1, 1024));
  so.max_queue = int(args.integer("--max-queue", 64, 0, 100000));
  so.ctx_size = args.integer("--ctx-size", 0, 0, int64_t(1) << 40);
  so.cache_tokens = args.integer("--cache-tokens", 16384, 0, int64_t(1) << 40);
  std::string alias = std::filesystem::path(dir).lexically_normal().filename().string();
  if (alias.empty()) alias = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  so.model_id = args.str("--alias", alias.empty() ? "nibble" : alias);
  so.draft_tokens = args.has("--no-spec") ? 0 : args.integer("--spec-draft-tokens", 0, 0, 15);

  // The flags every loading command shares (--device, --threads, the
  // backends, --bandwidth, --profile, --no-check-weights), then serve's own.
  EngineOptions eo = engine_options(args);
  eo.step_tokens = args.integer("--step-tokens", 256, 1, 1 << 20);

  // A client that hangs up mid-write must be an error on that write, not
  // the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // The socket opens first, so /health answers 503 "loading" while the
  // weights load (a 9 GB model takes a while) and 200 once they are in.
  server::HttpServer http(so);
  http.bind();
  std::fprintf(stderr, "nibble serve: listening on http://%s:%d (parallel %d, queue %d); loading %s\n",
               so.host.c_str(), http.port(), so.parallel, so.max_queue, dir.c_str());
  std::atomic<bool> served{false};
  std::thread listener([&] {
    http.serve();
    served.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> engine;
  // Loading a large model takes minutes (binding, checking, on a GPU the
  // upload): a plain line at every tenth of it, which reads the same in a
  // terminal and in a log.
  ProgressBar bar(stderr, ProgressBar::Mode::lines, "nibble serve");
  show_load_progress(eo, bar);
  try {
    engine = Engine::load(dir, eo);
    bar.finish();
    if (!engine->has_tokenizer()) fail("model folder ", dir, " has no tokenizer.json; the server needs one");
  } catch (...) {
    http.stop();
    listener.join();
    throw;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string no_draft = engine->draft_unavailable();
  if (so.draft_tokens > 0 && !no_draft.empty()) {
    http.stop();
    listener.join();
    fail("--spec-draft-tokens ", so.draft_tokens, ": speculative decoding needs the model's MTP layer: ", no_draft);
  }
  http.attach(*engine);
  const std::string where = engine->device() == "host"
                                ? "this machine's CPU"
                                : engine->device() + " (" + engine->device_description() + ")";
  std::fprintf(stderr, "nibble serve: %s loaded in %.2f s on %s; ready\n", so.model_id.c_str(), load_s, where.c_str());
  // Whether speculation runs, and why (as explain says it).
  if (so.draft_tokens > 0)
    std::fprintf(stderr, "nibble serve: speculative decoding: on, %lld drafts per step with the MTP layer "
                 "(--spec-draft-tokens)\n", (long long)so.draft_tokens);
  else if (args.has("--no-spec"))
    std::fprintf(stderr, "nibble serve: speculative decoding: off (--no-spec)\n");
  else if (!no_draft.empty())
    std::fprintf(stderr, "nibble serve: speculative decoding: off, the model has no usable MTP layer: %s\n",
                 no_draft.c_str());
  else
    std::fprintf(stderr, "nibble serve: speculative decoding: off; the model has an MTP layer, but %s "
                 "--spec-draft-tokens K turns it on.\n", kDefaultDraftWhy);
  while (g_stop_signal.load() == 0 && !served.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));

  std::fprintf(stderr, "nibble serve: %s, shutting down\n",
               g_stop_signal.load() == SIGINT ? "SIGINT" : g_stop_signal.load() ? "SIGTERM" : "listener ended");
  // A watchdog bounds the shutdown: a connection stuck in a kernel write
  // must not keep the process alive.
  std::thread([] {
    std::this_thread::sleep_for(kShutdownGrace);
    std::fprintf(stderr, "nibble serve: shutdown took over %lld s, exiting\n", (long long)kShutdownGrace.count());
    std::_Exit(1);
  }).detach();
  http.stop();
  listener.join();
  std::fprintf(stderr, "nibble serve: stopped\n");
  return 0;
}

const RegisterCommand reg({"serve", "serve the model over HTTP (OpenAI's API, continuous batching)", run_serve});

}  // namespace
}  // namespace nibble::cli
