// A small HTTP server (civetweb) for the operator's own endpoints: /healthz, /readyz and /metrics.
// Bind addresses follow controller-runtime's flags: ":8081" (all interfaces), "127.0.0.1:8081",
// "127.0.0.1:0" (any free port), or "0" (disabled).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "infergate/common/result.h"

struct mg_context;

namespace infergate::op::manager {

struct HttpAnswer {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpGetHandler = std::function<HttpAnswer()>;

class HttpEndpoints {
 public:
  // nullptr (and no error) when the address is "0".
  static Result<std::unique_ptr<HttpEndpoints>> start(const std::string& bind_address,
                                                      std::map<std::string, HttpGetHandler> handlers);
  ~HttpEndpoints();
  HttpEndpoints(const HttpEndpoints&) = delete;
  HttpEndpoints& operator=(const HttpEndpoints&) = delete;
  int port() const { return port_; }

  struct Route {
    HttpGetHandler handler;
  };

 private:
  HttpEndpoints() = default;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::map<std::string, std::unique_ptr<Route>> routes_;
};

// ":8080" -> "0.0.0.0:8080"; "host:port" unchanged; refuses anything else.
Result<std::string> civetweb_listen_spec(const std::string& bind_address);

}  // namespace infergate::op::manager
