// Routes, SSE streaming, authentication, the error envelope and the request
// log line. Every handler runs inside `guarded()`, which turns ApiError into
// its status and anything else into a 500 (the server's own failure).
#include "server/http_server.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <random>

#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/choice_builder.h"
#include "server/request.h"
#include "server/scheduler.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_harmony.h"
#include "util/error.h"

namespace nibble::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What the log line of the request on this connection thread reports. A
// request is handled start to end (routing, handler, streaming, logger) on
// one httplib thread, so a thread-local record needs no locking.
struct RequestLog {
  bool started = false;
  Clock::time_point start;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
thread_local RequestLog tl_log;

// Text from the model may hold broken UTF-8 (a reply cut inside a
// character); it is sent with U+FFFD rather than failing the dump.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

json error_body(int status, const std::string& type, const std::string& message, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(status) : json(code)}}}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e.status, e.type, e.what(), e.param, e.code));
  if (e.status == 503) res.set_header("Retry-After", "1");
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

int64_t unix_time() { return int64_t(std::time(nullptr)); }

// cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG,
// compiled into Debian's library), so a burst of more connections than that
// (32 clients starting at once) overflows the accept queue and some of them
// fail their first read. Linux lets listen() on a listening socket change
// its backlog: the socket is found among this process's descriptors by its
// port and raised to SOMAXCONN.
void widen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int accepting = 0;
    socklen_t len = sizeof accepting;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    const int p = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                  : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                               : -1;
    if (p == port) ::listen(fd, SOMAXCONN);
  }
}

// cpp-httplib 0.11 gives a handler no way to see its connection close
// (no is_connection_closed()), so a non-streamed request, which writes
// nothing until its reply is whole, would generate on for a client long
// gone. The handler's socket is found among this process's descriptors by
// its two ends (the request's local and remote address and port; httplib
// keeps it open while the handler runs, so the number cannot be reused
// meanwhile) and then polled: a readable socket whose peek reads 0 bytes has
// been closed by the peer. -1: not found (the check is then skipped).
int connection_fd(const httplib::Request& req) {
  auto port_of = [](const sockaddr_storage& a) {
    return a.ss_family == AF_INET    ? int(ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port))
           : a.ss_family == AF_INET6 ? int(ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port))
                                     : -1;
  };
  auto addr_of = [](const sockaddr_storage& a) {
    char buf[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
    if (a.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
    return std::string(buf);
  };
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (port_of(peer) != req.remote_port || addr_of(peer) != req.remote_addr) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0 || port_of(self) != req.local_port) continue;
    return fd;
  }
  return -1;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP)) return true;
  char c;
  // Data is a pipelined next request: still there. 0 bytes: closed.
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  int64_t created = unix_time();
  httplib::Server http;
  int bound_port = -1;
  // Set once by attach(); read by handlers only after `ready` is seen true.
  Engine* engine_ptr = nullptr;
  std::unique_ptr<Scheduler> scheduler_ptr;
  int64_t ctx = 0;
  std::atomic<bool> ready{false};
  // serve() and stop() in either order (serve() runs on its own thread and
  // may not have begun when a failed load stops the server): httplib only
  // hears a stop once its loop runs.
  std::mutex run_mu;
  bool stopped = false, serving = false;
  std::atomic<bool> served{false};
  Engine& engine() { return *engine_ptr; }
  Scheduler& scheduler() { return *scheduler_ptr; }
  ChatFormatKind chat_format = ChatFormatKind::DeepSeekV4;  // the model's, set by attach()

  std::mutex mu;                       // guards what follows
  std::mt19937_64 seeds{std::random_device{}()};
  std::map<int, int64_t> by_status;    // requests answered, for /metrics
  int64_t next_id = 0;

  explicit Impl(ServerOptions o) : opt(std::move(o)) { routes(); }

  void attach(Engine& e) {
    engine_ptr = &e;
    ctx = e.max_context();
    if (opt.ctx_size > 0) ctx = std::min(ctx, opt.ctx_size);
    scheduler_ptr = std::make_unique<Scheduler>(e, opt.parallel, opt.max_queue, opt.cache_tokens, opt.draft_tokens);
    chat_format = detect_chat_format(e.architecture(), e.has_tokenizer() ? engine_tokenize() : TokenizeFn());
    ready.store(true);
  }

  // ---- plumbing --------------------------------------------------------------

  template <class F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        // llama-server's answer while the weights load.
        if (!ready.load()) throw ApiError(503, "unavailable_error", "Loading model");
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_json(res, 500, error_body(500, "server_error", e.what(), "", ""));
      }
    };
  }

  std::string request_id(const char* prefix) {
    std::lock_guard<std::mutex> lock(mu);
    return std::string(prefix) + std::to_string(created) + "-" + std::to_string(next_id++);
  }

  void check_model(const std::string& model) const {
    if (!model.empty() && model != opt.model_id)
      throw ApiError(404, "not_found_error", "the model `" + model + "` does not exist (this server serves `" +
                                                 opt.model_id + "`)",
                     "model", "model_not_found");
  }

  // The job for a prompt: the context checked, the budget capped to it, a
  // seed drawn when the client gave none.
  JobParams job_params(const GenerationRequest& r, std::vector<int32_t> prompt) {
    const int64_t n = int64_t(prompt.size());
    if (n >= ctx)
      bad_request(r.messages.empty() ? "prompt" : "messages", "the prompt is ", n,
                  " tokens, but the context holds ", ctx, " (at least one token must be left to generate)");
    JobParams p;
    p.prompt = std::move(prompt);
    p.max_tokens = std::min(r.max_tokens.value_or(ctx - n), ctx - n);
    p.sampling = r.sampling;
    if (!r.seed_given) {
      std::lock_guard<std::mutex> lock(mu);
      p.sampling.seed = seeds();
    }
    p.stop = r.stop;
    p.top_logprobs = r.logprobs ? r.top_logprobs : -1;
    return p;
  }

  // ---- generation ------------------------------------------------------------

  static json usage(int64_t prompt, int64_t completion, int64_t cached) {
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  // Runs a request's jobs to their end for a non-streamed reply.
  void answer_whole(const httplib::Request& req, httplib::Response& res, const std::vector<std::shared_ptr<Job>>& jobs,
                    std::vector<ChoiceBuilder>& choices, bool chat, const std::string& id) {
    int64_t tokens = 0;
    const int fd = connection_fd(req);
    for (size_t i = 0; i < jobs.size(); ++i) {
      JobUpdate u;
      for (;;) {
        // Woken at the end only; the 50 ms polls let a finished tool-call
        // block stop the job early, and notice a client that has gone (its
        // jobs are then cancelled at the scheduler's next step).
        const bool got = jobs[i]->wait_end(u, std::chrono::milliseconds(50));
        if (peer_closed(fd)) {
          for (auto& j : jobs) j->cancel();
          res.status = 499;  // nginx's "client closed request", for the log line; nobody reads it
          return;
        }
        if (!got) continue;
        choices[i].add(u);
        if (choices[i].wants_stop()) jobs[i]->stop();
        if (u.done) break;
      }
      tokens += u.completion_tokens;
      tl_log.completion_tokens = tokens;
      if (u.finish_reason == "cancelled" || u.finish_reason == "error") {
        for (auto& j : jobs) j->cancel();  // the other choices have no reader any more
        if (u.finish_reason == "cancelled") throw ApiError(503, "unavailable_error", "the server is shutting down");
        throw std::runtime_error(u.error);
      }
    }
    json out = json::array();
    for (const auto& c : choices) out.push_back(c.whole());
    send_json(res, 200,
              {{"id", id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", unix_time()},
               {"model", opt.model_id},
               {"choices", std::move(out)},
               {"usage", usage(int64_t(jobs[0]->params.prompt.size()), tokens, jobs[0]->cached_tokens())}});
  }

  // Streams a request's jobs as server-sent events, OpenAI's chunk shapes
  // (choices interleaved by index when n > 1).
  void answer_stream(httplib::Response& res, std::vector<std::shared_ptr<Job>> jobs,
                     std::vector<ChoiceBuilder> choices, bool chat, const std::string& id, bool include_usage) {
    struct Stream {
      std::vector<std::shared_ptr<Job>> jobs;
      std::vector<ChoiceBuilder> choices;
      std::vector<int64_t> tokens;
      bool chat, include_usage;
      std::string id, model;
      int64_t created;
      Clock::time_point last_write = Clock::now();
      void cancel() {
        for (auto& j : jobs) j->cancel();
      }
    };
    auto st = std::make_shared<Stream>(Stream{std::move(jobs), std::move(choices), {}, chat, include_usage, id,
                                              opt.model_id, unix_time()});
    st->tokens.assign(st->jobs.size(), 0);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not buffer the stream
    const int64_t prompt_tokens = int64_t(st->jobs[0]->params.prompt.size());
    auto chunk = [st](json choice) {
      return json{{"id", st->id},
                  {"object", st->chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", st->created},
                  {"model", st->model},
                  {"choices", json::array({std::move(choice)})}};
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [st, chunk, prompt_tokens](size_t, httplib::DataSink& sink) {
          // One choice waits up to a second; several are polled in turn.
          const auto wait = std::chrono::milliseconds(st->jobs.size() == 1 ? 1000 : 20);
          std::string out;
          bool all_done = true, failed = false;
          std::string error;
          for (size_t i = 0; i < st->jobs.size(); ++i) {
            if (st->choices[i].done()) continue;
            JobUpdate u;
            if (st->jobs[i]->wait(u, wait)) {
              st->tokens[i] = u.completion_tokens;
              for (auto& c : st->choices[i].stream(u)) out += sse(chunk(std::move(c)));
              if (st->choices[i].wants_stop()) st->jobs[i]->stop();
              if (u.done && (u.finish_reason == "cancelled" || u.finish_reason == "error")) {
                failed = true;
                error = u.finish_reason == "cancelled" ? "" : u.error;
              }
            }
            if (!st->choices[i].done()) all_done = false;
          }
          int64_t total = 0;
          for (int64_t t : st->tokens) total += t;
          if (failed) {
            const bool down = error.empty();
            out += sse(error_body(down ? 503 : 500, down ? "unavailable_error" : "server_error",
                                  down ? "the request was cancelled (the server is shutting down)" : error, "", ""));
            out += "data: [DONE]\n\n";
            st->cancel();
          } else if (all_done) {
            if (st->include_usage) {
              json last = chunk(nullptr);
              last["choices"] = json::array();
              last["usage"] = usage(prompt_tokens, total, st->jobs[0]->cached_tokens());
              out += sse(last);
            }
            out += "data: [DONE]\n\n";
          }
          if (out.empty() && Clock::now() - st->last_write >= std::chrono::seconds(1)) {
            // Nothing new for a second (a long prefill, a full queue): an
            // SSE comment keeps the connection alive, and failing to write
            // it is how a vanished client is noticed.
            out = ": keep-alive\n\n";
          }
          if (!out.empty()) {
            if (!sink.write(out.data(), out.size())) {
              st->cancel();
              return false;
            }
            st->last_write = Clock::now();
          }
          if (failed || all_done) {
            tl_log.completion_tokens = total;
            sink.done();
          }
          return true;
        },
        [st](bool) { st->cancel(); });  // a no-op once the jobs are done
  }

  void generate(const httplib::Request& req, httplib::Response& res, GenerationRequest r, std::vector<int32_t> prompt,
                bool chat, ChoiceOptions co = {}) {
    check_model(r.model);
    tl_log.prompt_tokens = int64_t(prompt.size());
    JobParams p = job_params(r, std::move(prompt));
    p.stop_tokens = co.stop_tokens;
    auto jobs = scheduler().submit(std::move(p), r.n);
    const std::string id = request_id(chat ? "chatcmpl-" : "cmpl-");
    co.chat = chat;
    co.logprobs = r.logprobs;
    std::vector<ChoiceBuilder> choices;
    Engine* e = engine_ptr;
    for (size_t i = 0; i < jobs.size(); ++i) {
      ChoiceOptions ci = co;
      ci.call_id_prefix = "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(i) + "_";
      choices.emplace_back(
          i, std::move(ci), [e](int32_t t) { return e->detokenize(std::span<const int32_t>(&t, 1)); },
          [e](int32_t t) { return e->token_bytes(t); });
    }
    if (r.stream) answer_stream(res, std::move(jobs), std::move(choices), chat, id, r.include_usage);
    else answer_whole(req, res, jobs, choices, chat, id);
  }

  TokenizeFn engine_tokenize() {
    Engine* e = engine_ptr;
    return [e](const std::string& text, bool allow_special) { return e->tokenize(text, allow_special); };
  }

  // The chat prompt's ids in the model's chat format (tokenizer/chat_format.h).
  std::vector<int32_t> chat_prompt(const GenerationRequest& r, ChoiceOptions& co) {
    if (chat_format == ChatFormatKind::Harmony) return harmony_prompt(r, co);
    if (chat_format == ChatFormatKind::Kimi || chat_format == ChatFormatKind::DeepSeekV3) return format_prompt(r, co);
    return engine().tokenize(dsv4_prompt(r, co), /*allow_special=*/true);
  }

  // Kimi K2 and DeepSeek-V3 / R1: the format's own rendering (tools in the
  // first message, where Kimi's template collects them; V3's has none), the
  // reply split by the format's parser as it streams. A forced tool_choice
  // would need the call's opening written after the generation prompt,
  // which these formats do not define: refused, naming the field.
  std::vector<int32_t> format_prompt(const GenerationRequest& r, ChoiceOptions& co) {
    if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named)
      bad_request("tool_choice", "the model's chat format ", chat_format_name(chat_format),
                  " has no forced tool call; use \"auto\" or \"none\"");
    std::vector<ChatMessage> messages = r.messages;
    if (!r.tools.empty() && r.tool_choice != ToolChoice::None) messages.front().tools = r.tools;
    ChatOptions o;
    o.mode = r.thinking ? ThinkingMode::Thinking : ThinkingMode::Chat;
    o.effort = r.effort;
    std::shared_ptr<const ChatFormat> format = make_chat_format(chat_format, engine_tokenize());
    std::vector<int32_t> ids;
    try {
      ids = format->encode(messages, o);
    } catch (const Error& e) {
      bad_request("messages", e.what());
    }
    co.thinking = format->reasons(o);
    co.start = ReplyParser::Start::Reparsed;
    co.whole = [format, o](std::string_view text) { return format->parse(text, o); };
    co.stop_tokens = format->stop_tokens();
    co.tool_choice = r.tools.empty() ? ToolChoice::None : r.tool_choice;
    co.parallel_tool_calls = r.parallel_tool_calls;
    return ids;
  }

  // gpt-oss: harmony's rendering, tools in the developer message. A named
  // tool_choice writes the call's header after the generation prompt;
  // "required" is offered as "auto" (a header cut inside the function name
  // would tokenize unlike any call the model saw).
  std::vector<int32_t> harmony_prompt(const GenerationRequest& r, ChoiceOptions& co) {
    std::vector<ChatMessage> messages = r.messages;
    if (!r.tools.empty() && r.tool_choice != ToolChoice::None) {
      ChatMessage dev;
      dev.role = ChatRole::Developer;
      dev.tools = r.tools;
      messages.insert(messages.begin(), std::move(dev));
    }
    ChatOptions o;
    o.effort = r.effort;
    std::vector<int32_t> ids;
    try {
      ids = make_chat_format(ChatFormatKind::Harmony, engine_tokenize())->encode(messages, o);
    } catch (const Error& e) {
      bad_request("messages", e.what());
    }
    if (r.tool_choice == ToolChoice::Named && !r.tools.empty()) {
      const auto head = encode_harmony_forced_call(r.tool_choice_name, engine_tokenize());
      ids.insert(ids.end(), head.begin(), head.end());
      co.forced_name = r.tool_choice_name;
    }
    co.thinking = true;
    co.start = ReplyParser::Start::Harmony;
    co.tool_choice = r.tools.empty() ? ToolChoice::None : r.tool_choice;
    co.parallel_tool_calls = r.parallel_tool_calls;
    return ids;
  }

  // DeepSeek-V4's encoding of the messages with the request's tools in the
  // system prompt, and for a forced tool_choice the opening of the call
  // written after the generation prompt.
  std::string dsv4_prompt(const GenerationRequest& r, ChoiceOptions& co) {
    std::vector<ChatMessage> messages = r.messages;
    if (!r.tools.empty() && r.tool_choice != ToolChoice::None) {
      // DeepSeek's encoder reads tools from the system message.
      if (messages.front().role != ChatRole::System) {
        ChatMessage sys;
        sys.role = ChatRole::System;
        messages.insert(messages.begin(), std::move(sys));
      }
      messages.front().tools = r.tools;
    }
    ChatEncodeOptions eo;
    eo.mode = r.thinking ? ThinkingMode::Thinking : ThinkingMode::Chat;
    eo.effort = r.effort;
    std::string text;
    try {
      text = encode_dsv4_chat(messages, eo);
    } catch (const Error& e) {
      bad_request("messages", e.what());  // the encoding refused the conversation
    }
    co.thinking = r.thinking;
    co.tool_choice = r.tools.empty() ? ToolChoice::None : r.tool_choice;
    co.parallel_tool_calls = r.parallel_tool_calls;
    if (r.tool_choice == ToolChoice::Required) {
      text += "\n\n<｜DSML｜tool_calls>\n";
      co.start = ReplyParser::Start::InToolCalls;
    } else if (r.tool_choice == ToolChoice::Named) {
      text += "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + r.tool_choice_name + "\">\n";
      co.start = ReplyParser::Start::InInvoke;
      co.forced_name = r.tool_choice_name;
    }
    return text;
  }

  // ---- routes ----------------------------------------------------------------

  void routes() {
    // The chat page (src/server/chat_page.h): static, open without the key
    // (it holds no data; its requests carry the key the user enters).
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = chat_page_html();
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
      res.set_header("Cache-Control", "no-cache");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (ready.load()) return send_json(res, 200, {{"status", "ok"}});
      // Both shapes clients probe for: a status word, and llama-server's envelope.
      json body = error_body(503, "unavailable_error", "Loading model", "", "");
      body["status"] = "loading";
      send_json(res, 503, body);
      res.set_header("Retry-After", "1");
    });
    http.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
    }));
    http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
      const std::string id = req.matches[1];
      if (id != opt.model_id) check_model(id);
      send_json(res, 200, model_json());
    }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      GenerationRequest r =
          parse_completion_request(req.body, engine().vocab_size(), engine().generation_defaults().sampling);
      std::vector<int32_t> prompt;
      if (r.prompt_is_ids) {
        prompt = r.prompt_ids;
      } else {
        // Raw text after BOS, as `nibble run` feeds it.
        if (engine().bos_token_id() >= 0) prompt.push_back(int32_t(engine().bos_token_id()));
        const auto ids = engine().tokenize(r.prompt_text, /*allow_special=*/true);
        prompt.insert(prompt.end(), ids.begin(), ids.end());
      }
      generate(req, res, std::move(r), std::move(prompt), false);
    }));
    http.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      GenerationRequest r = parse_chat_request(req.body, engine().generation_defaults().sampling);
      ChoiceOptions co;
      auto prompt = chat_prompt(r, co);
      generate(req, res, std::move(r), std::move(prompt), true, std::move(co));
    }));
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      const TokenizeRequest r = parse_tokenize_request(req.body);
      check_model(r.model);
      std::vector<int32_t> ids;
      if (r.add_special && engine().bos_token_id() >= 0) ids.push_back(int32_t(engine().bos_token_id()));
      const auto t = engine().tokenize(r.content, /*allow_special=*/true);
      ids.insert(ids.end(), t.begin(), t.end());
      send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx}});
    }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
      const DetokenizeRequest r = parse_detokenize_request(req.body, engine().vocab_size());
      check_model(r.model);
      const std::string text = engine().detokenize(r.tokens);
      send_json(res, 200, {{"prompt", text}, {"content", text}});  // vLLM's and llama-server's names
    }));

    // Authentication before routing; /health stays open for probes.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      tl_log = RequestLog{true, Clock::now(), 0, 0};
      if (opt.api_key.empty() || req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
      std::string given = req.get_header_value("X-Api-Key");
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
      if (!given.empty() && constant_time_equal(given, opt.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "authentication_error",
                               given.empty() ? "missing API key (Authorization: Bearer KEY or X-Api-Key: KEY)"
                                             : "invalid API key",
                               "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Statuses httplib sets itself (no route, body too large, bad request
    // line) get the same envelope as ours.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404)
        send_error(res, ApiError(404, "not_found_error", "no route " + req.method + " " + req.path, "", "not_found"));
      else if (res.status == 413)
        send_error(res, ApiError(413, "invalid_request_error",
                                 "the request body is larger than " + std::to_string(opt.max_body_bytes) + " bytes",
                                 "", "request_too_large"));
      else
        send_error(res, ApiError(res.status, "invalid_request_error", "malformed HTTP request"));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      char ms[32] = "-";
      if (tl_log.started)
        std::snprintf(ms, sizeof ms, "%.1f",
                      std::chrono::duration<double, std::milli>(Clock::now() - tl_log.start).count());
      std::fprintf(stderr, "%s %s %d prompt=%lld gen=%lld %s ms\n", req.method.c_str(), req.path.c_str(), res.status,
                   (long long)tl_log.prompt_tokens, (long long)tl_log.completion_tokens, ms);
      tl_log = RequestLog{};
      std::lock_guard<std::mutex> lock(mu);
      ++by_status[res.status];
    });

    // One thread per connection, held for its keep-alive life (httplib's
    // model): enough for every running and queued stream plus 32 more for
    // probes and idle keep-alive connections, so /health is always served.
    const size_t threads = std::max<size_t>(96, size_t(opt.parallel + opt.max_queue + 32));
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_keep_alive_max_count(100);
    http.set_keep_alive_timeout(5);
    http.set_read_timeout(30);
    http.set_write_timeout(10);  // a client that stops reading is dropped, its job cancelled
  }

  json model_json() const {
    return {{"id", opt.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "nibble"},
            {"max_model_len", ctx}};
  }

  std::string metrics() {
    const SchedulerStats s = scheduler().stats();
    std::string out;
    auto metric = [&out](const char* name, const char* type, const char* help, int64_t v) {
      out += std::string("# HELP nibble:") + name + " " + help + "\n# TYPE nibble:" + name + " " + type + "\nnibble:" +
             name + " " + std::to_string(v) + "\n";
    };
    metric("requests_running", "gauge", "Requests holding a sequence.", s.running);
    metric("requests_waiting", "gauge", "Requests queued for a sequence.", s.waiting);
    metric("live_sequences", "gauge", "Sequences the engine holds.", int64_t(engine().live_sequences()));
    metric("prompt_tokens_total", "counter", "Prompt tokens prefilled.", s.prompt_tokens);
    metric("generation_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
    metric("steps_total", "counter", "Engine steps run.", s.steps);
    metric("requests_cancelled_total", "counter", "Generations cancelled (client gone, shutdown).", s.cancelled);
    metric("prefix_cache_hits_total", "counter", "Requests that started from a kept prompt state.", s.cache_hits);
    metric("prefix_cache_entries", "gauge", "Prompt states kept for reuse.", s.cache_entries);
    metric("prefix_cache_tokens", "gauge", "Prompt tokens those states hold.", s.cache_tokens);
    // Speculative decoding, under vLLM's names (its dashboards compute the
    // mean acceptance length as 1 + accepted / drafts).
    int64_t drafted = 0, accepted = 0;
    for (int64_t d : s.spec.drafted) drafted += d;
    for (int64_t a : s.spec.accepted) accepted += a;
    metric("spec_decode_num_drafts_total", "counter", "Verify steps that checked drafts.", s.spec.steps);
    metric("spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed by the MTP layer.", drafted);
    metric("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", accepted);
    out += "# HELP nibble:spec_decode_num_accepted_tokens_per_pos_total Draft tokens accepted, by draft position "
           "(0 = the first draft).\n# TYPE nibble:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t j = 0; j < s.spec.accepted.size(); ++j)
      out += "nibble:spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(j) + "\"} " +
             std::to_string(s.spec.accepted[j]) + "\n";
    out += s.ttft.exposition("nibble:time_to_first_token_seconds", "Time from a request's arrival to its first token.");
    out += s.itl.exposition("nibble:inter_token_latency_seconds", "Time between consecutive tokens of a request.");
    out += s.tpot.exposition("nibble:time_per_output_token_seconds",
                             "A finished request's mean time per output token after the first.");
    out += s.e2e.exposition("nibble:e2e_request_latency_seconds", "Time from a request's arrival to its end.");
    out += "# HELP nibble:requests_total HTTP requests answered, by status.\n# TYPE nibble:requests_total counter\n";
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [status, n] : by_status)
      out += "nibble:requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
    return out;
  }
};

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::HttpServer(Engine& engine, ServerOptions options) : HttpServer(std::move(options)) { attach(engine); }

void HttpServer::attach(Engine& engine) { impl_->attach(engine); }

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::bind() {
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.opt.host);
  } else if (s.http.bind_to_port(s.opt.host, s.opt.port)) {
    s.bound_port = s.opt.port;
  }
  if (s.bound_port <= 0) fail("cannot listen on ", s.opt.host, ":", s.opt.port, " (in use, or not an address here)");
  widen_backlog(s.bound_port);
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::serve() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    if (s.stopped) return;  // stop() came first: never listen
    s.serving = true;
  }
  s.http.listen_after_bind();
  s.served.store(true);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    s.stopped = true;
    // serve() has begun: wait for httplib's loop, the only state in which
    // its stop is heard (or for serve() to have ended on its own).
    if (s.serving)
      while (!s.http.is_running() && !s.served.load()) std::this_thread::yield();
  }
  // Stop accepting first, then cancel: streams see their jobs end and close.
  s.http.stop();
  if (s.scheduler_ptr) s.scheduler_ptr->shutdown();
}

}  // namespace nibble::server
