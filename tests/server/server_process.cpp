#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <httplib.h>

extern char** environ;

namespace nibble::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

httplib::Headers to_headers(const std::vector<std::pair<std::string, std::string>>& h) {
  httplib::Headers out;
  for (const auto& [k, v] : h) out.emplace(k, v);
  return out;
}

HttpReply reply_of(const httplib::Result& r) {
  HttpReply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.retry_after = r->get_header_value("Retry-After");
  return out;
}

}  // namespace

std::string ServerProcess::shipped_model() { return std::string(NIBBLE_SOURCE_DIR) + "/models/dsv4-tiny"; }

ServerProcess::ServerProcess(const std::string& model_dir, const std::vector<std::string>& extra) {
  // A client write to a server that hung up must fail, not kill the test.
  signal(SIGPIPE, SIG_IGN);
  static int counter = 0;
  log_path_ = (std::filesystem::temp_directory_path() /
               ("nibble_serve_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".log"))
                  .string();
  std::vector<std::string> args = {NIBBLE_BINARY, "serve", model_dir, "--port", "0", "-t", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = read_file(log_path_);
    if (std::regex_search(text, m, listening)) {
      port_ = std::stoi(m[1]);
      // The socket opens before the model loads; tests start once it is ready.
      while (std::chrono::steady_clock::now() < deadline) {
        const int status = http_get(port_, "/health").status;
        if (health_seen_.empty() || health_seen_.back() != status) health_seen_.push_back(status);
        if (status == 200) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      break;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("nibble serve exited at start: " + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("nibble serve was not listening and ready within 60 s: " + read_file(log_path_));
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && terminate(20) == -1) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

int ServerProcess::terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string ServerProcess::log() const { return read_file(log_path_); }

HttpReply http_get(int port, const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  return reply_of(c.Get(path.c_str(), to_headers(headers)));
}

HttpReply http_post(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  return reply_of(c.Post(path.c_str(), to_headers(headers), body, "application/json"));
}

int http_stream(int port, const std::string& path, const std::string& body,
                const std::function<bool(const std::string&)>& on_event) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.headers.emplace("Content-Type", "application/json");
  std::string buffer;
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    // Events end with a blank line; comments (":...") are keep-alives.
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0 && !on_event(event.substr(6))) return false;
    }
    return true;
  };
  auto r = c.send(req);
  if (r) status = r->status;
  else if (getenv("NIBBLE_TEST_DEBUG")) fprintf(stderr, "http_stream: %s\n", httplib::to_string(r.error()).c_str());
  return status;
}

std::vector<nlohmann::json> stream_events(int port, const std::string& path, const nlohmann::json& body,
                                          bool* saw_done) {
  std::vector<nlohmann::json> events;
  bool done = false;
  http_stream(port, path, body.dump(), [&](const std::string& data) {
    if (data == "[DONE]") done = true;
    else events.push_back(nlohmann::json::parse(data));
    return true;
  });
  if (saw_done) *saw_done = done;
  return events;
}

}  // namespace nibble::testing
