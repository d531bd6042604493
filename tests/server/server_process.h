// The real `nibble serve` for the HTTP tests: started on the shipped model
// on a free loopback port (--port 0; the port is read from its start-up
// line), stopped with SIGTERM, its stderr (the request log) kept in a file.
#pragma once

#include <sys/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nibble::testing {

class ServerProcess {
 public:
  // Starts NIBBLE_BINARY serve MODELS/dsv4-tiny --port 0 -t 1 `extra` (one
  // thread: the tests run beside others, and spinning workers on a shared
  // machine cost far more than they give on this tiny model); waits
  // (bounded) for it to listen, then polls /health until 200 (every status
  // seen is kept in health_seen()). Fails the test (throws) if it does not.
  explicit ServerProcess(const std::vector<std::string>& extra = {}) : ServerProcess(shipped_model(), extra) {}
  // The same on the model in `model_dir`.
  ServerProcess(const std::string& model_dir, const std::vector<std::string>& extra);
  static std::string shipped_model();
  ~ServerProcess();

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and waits up to `timeout_s`; the exit status (-1: still
  // running, then it is killed).
  int terminate(double timeout_s);
  std::string log() const;  // its stderr so far
  // /health statuses from the first poll after the port opened until 200,
  // repeats collapsed (e.g. {503, 200} when the poll caught the load).
  const std::vector<int>& health_seen() const { return health_seen_; }

 private:
  std::vector<int> health_seen_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

struct HttpReply {
  int status = 0;           // 0: no reply (connection failed)
  std::string body;
  std::string retry_after;  // the Retry-After header
};

HttpReply http_get(int port, const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers = {});
HttpReply http_post(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers = {});

// POSTs and reads a server-sent-event stream; `on_event` gets each data
// payload as it arrives ("[DONE]" included) and may return false to hang up.
// Returns the status.
int http_stream(int port, const std::string& path, const std::string& body,
                const std::function<bool(const std::string&)>& on_event);

// The JSON payloads of a stream, [DONE] excluded.
std::vector<nlohmann::json> stream_events(int port, const std::string& path, const nlohmann::json& body,
                                          bool* saw_done = nullptr);

}  // namespace nibble::testing
