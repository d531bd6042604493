// The HTTP face of the server: OpenAI-shaped routes over cpp-httplib
// (Debian's libcpp-httplib-dev; docs/server.md says why it fits). Handlers
// run on httplib's connection threads, parse and check the request there,
// and hand generation to the Scheduler; they never call Engine::step.
//
// The socket can open before the model is loaded (HttpServer(options),
// serve(), then attach(engine)): until attach() every route answers 503,
// /health with {"status": "loading"}, so probes see the load happen.
//
// Routes: GET / (the chat page), GET /health, GET /v1/models, GET /v1/models/{id}, GET /metrics,
// POST /v1/completions, POST /v1/chat/completions, POST /tokenize,
// POST /detokenize. Everything else is a 404 in OpenAI's error envelope.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nibble/engine.h"

namespace nibble::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (port() tells which)
  std::string api_key;             // "" = no authentication
  std::string model_id;            // the name /v1/models lists and requests may give
  int parallel = 4;                // sequences generating at once
  int max_queue = 64;              // requests waiting beyond those
  int64_t ctx_size = 0;            // tokens per sequence; 0 = the model's
  int64_t cache_tokens = 16384;    // tokens kept for prefix reuse (prompts, finished replies); 0 = off
  int64_t draft_tokens = 0;        // speculative decoding's drafts per step (MTP layer); 0 = off
  size_t max_body_bytes = 8u << 20;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);      // loading until attach()
  HttpServer(Engine& engine, ServerOptions options);
  ~HttpServer();
  // The model is ready: requests are served from now on (any thread, once).
  void attach(Engine& engine);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; throws nibble::Error naming host:port.
  void bind();
  int port() const;
  // Serves until stop(); blocks (run it on its own thread). Returns at once
  // after a stop() that came first.
  void serve();
  // Stops accepting, cancels every request, then lets serve() return once
  // the connection threads have ended their streams. Also before serve() has
  // begun listening (a load that failed right after bind()).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nibble::server
