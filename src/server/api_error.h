// A request the server refuses, as OpenAI reports it: an HTTP status and the
// envelope {"error": {"message", "type", "param", "code"}}. Thrown by the
// request parser and the scheduler on the HTTP threads, caught by the route
// wrapper in http_server.cpp, so a client's mistake never becomes a 500
// (clients retry 5xx and would generate twice).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nibble::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}

  int status;         // 400, 401, 404, 413, 503
  std::string type;   // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string param;  // the request field at fault ("" = none)
  std::string code;   // OpenAI's machine-readable code ("" = null)
};

// bad_request("param", "max_tokens must be >= 1, got ", v) throws a 400 naming the field.
template <class... Parts>
[[noreturn]] void bad_request(const std::string& param, const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw ApiError(400, "invalid_request_error", s.str(), param);
}

}  // namespace nibble::server
