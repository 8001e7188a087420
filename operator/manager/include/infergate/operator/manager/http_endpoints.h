// The operator's own HTTP endpoints on the project's HTTP server (infergate/http/server.h): the probes
// (/healthz, /readyz: plain HTTP, no authentication, for the kubelet) and /metrics, which is served
// over TLS to callers whose bearer token a RequestAuthorizer accepts, the way Kubernetes components
// and controller-runtime's secure metrics serving do it (docs/metrics.md, "Scraping the operator").
// Bind addresses follow controller-runtime's flags: ":8443" (all interfaces), "127.0.0.1:8443",
// "127.0.0.1:0" (any free port), or "0" (disabled).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "infergate/common/result.h"
#include "infergate/http/server.h"

namespace infergate::op::manager {

struct HttpAnswer {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpGetHandler = std::function<HttpAnswer()>;

// Whether a request may go on: 200 allowed; 401 no or unknown token; 403 a known user without the
// permission; 503 the decision could not be made (the API server did not answer). `message` says why
// (it names the user, never the token).
struct AccessDecision {
  int status = 200;
  std::string message;
  bool allowed() const { return status == 200; }
};

// Decides whether the holder of a bearer token may `verb` the non-resource URL `path`. May block (it
// may ask the API server); called from the endpoints' own threads, never an I/O thread. Thread-safe.
class RequestAuthorizer {
 public:
  virtual ~RequestAuthorizer() = default;
  virtual AccessDecision check(std::string_view bearer_token, std::string_view verb,
                               std::string_view path) = 0;
};

struct EndpointOptions {
  std::string bind_address;             // see the file comment; "0" disables
  std::optional<http::TlsOptions> tls;  // serve over TLS with this material
  // When set, every request needs a bearer token it accepts (checked for verb "get" on the path);
  // not owned, must outlive the endpoints.
  RequestAuthorizer* authorizer = nullptr;
};

class HttpEndpoints {
 public:
  // nullptr (and no error) when the address is "0". GET and HEAD only (405 otherwise); other paths 404.
  static Result<std::unique_ptr<HttpEndpoints>> start(EndpointOptions options,
                                                      std::map<std::string, HttpGetHandler> handlers);
  ~HttpEndpoints();
  HttpEndpoints(const HttpEndpoints&) = delete;
  HttpEndpoints& operator=(const HttpEndpoints&) = delete;

  int port() const;
  bool tls() const;
  // New serving material for connections from now on (a rotated certificate).
  Status reload_tls(const http::TlsOptions& tls);

 private:
  HttpEndpoints() = default;
  void serve(const std::shared_ptr<http::Exchange>& ex) const;

  std::map<std::string, HttpGetHandler> handlers_;
  RequestAuthorizer* authorizer_ = nullptr;
  std::unique_ptr<http::BlockingHandlers> pool_;  // for authorised endpoints: the check may block
  std::unique_ptr<http::Server> server_;
};

// ":8080" -> ("0.0.0.0", 8080); "host:port" split; refuses anything else, naming the text.
Result<std::pair<std::string, int>> parse_bind_address(const std::string& bind_address);

}  // namespace infergate::op::manager
