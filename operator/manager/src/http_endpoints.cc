// The probe and metrics endpoints: routes, methods, and the authorisation of a bearer token.
#include "infergate/operator/manager/http_endpoints.h"

#include "infergate/common/log.h"

namespace infergate::op::manager {

Result<std::pair<std::string, int>> parse_bind_address(const std::string& bind) {
  if (bind.empty()) return invalid_argument("empty bind address");
  auto colon = bind.rfind(':');
  if (colon == std::string::npos) return invalid_argument("bind address \"" + bind + "\": want [host]:port");
  std::string host = bind.substr(0, colon), port = bind.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    return invalid_argument("bind address \"" + bind + "\": the port must be a number from 0 to 65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  return std::make_pair(host, std::stoi(port));
}

Result<std::unique_ptr<HttpEndpoints>> HttpEndpoints::start(EndpointOptions options,
                                                            std::map<std::string, HttpGetHandler> handlers) {
  if (options.bind_address == "0") return std::unique_ptr<HttpEndpoints>();
  INFERGATE_ASSIGN_OR_RETURN(auto hp, parse_bind_address(options.bind_address));
  std::unique_ptr<HttpEndpoints> e(new HttpEndpoints());
  e->handlers_ = std::move(handlers);
  e->authorizer_ = options.authorizer;
  http::ServerOptions so;
  so.host = hp.first;
  so.port = hp.second;
  so.io_threads = 1;
  so.max_body_bytes = 64u << 10;  // GETs: no body worth reading
  so.request_timeout = std::chrono::seconds(10);
  so.write_timeout = std::chrono::seconds(10);
  so.max_connections = 256;
  so.tls = std::move(options.tls);
  so.server_name = "infergate-operator";
  const HttpEndpoints* self = e.get();
  http::Handler handler = [self](std::shared_ptr<http::Exchange> ex) { self->serve(ex); };
  if (e->authorizer_) {
    // A check may wait for the API server: off the I/O thread, a few at a time.
    e->pool_ = std::make_unique<http::BlockingHandlers>(4);
    handler = e->pool_->wrap(std::move(handler));
  }
  auto server = http::Server::start(std::move(so), std::move(handler));
  if (!server.ok()) return std::move(server).error().context("cannot listen on " + options.bind_address);
  e->server_ = std::move(*server);
  return e;
}

HttpEndpoints::~HttpEndpoints() {
  if (server_) server_->stop();
  if (pool_) pool_->stop();
  server_.reset();
}

int HttpEndpoints::port() const { return server_ ? server_->port() : 0; }
bool HttpEndpoints::tls() const { return server_ && server_->tls(); }
Status HttpEndpoints::reload_tls(const http::TlsOptions& tls) { return server_->reload_tls(tls); }

void HttpEndpoints::serve(const std::shared_ptr<http::Exchange>& ex) const {
  const http::Request& req = ex->request();
  auto answer = [&](const HttpAnswer& a, http::Headers headers = {}) {
    headers.emplace_back("Cache-Control", "no-cache");
    ex->respond(
        http::Response{a.status, a.content_type, std::move(headers), req.method == "HEAD" ? "" : a.body});
  };
  auto route = handlers_.find(req.path);
  if (route == handlers_.end()) return answer({404, "text/plain; charset=utf-8", "not found\n"});
  if (req.method != "GET" && req.method != "HEAD") {
    return answer({405, "text/plain; charset=utf-8", "method not allowed\n"}, {{"Allow", "GET, HEAD"}});
  }
  if (authorizer_) {
    const std::string token = req.bearer_token();
    AccessDecision d =
        token.empty() ? AccessDecision{401, "no bearer token"} : authorizer_->check(token, "get", req.path);
    if (!d.allowed()) {
      log::debug("refused a request to a protected endpoint",
                 {{"path", req.path}, {"status", d.status}, {"reason", d.message}});
      http::Headers h;
      if (d.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
      if (d.status == 503) h.emplace_back("Retry-After", "5");
      const char* word = d.status == 401 ? "Unauthorized" : d.status == 403 ? "Forbidden" : "Unavailable";
      return answer({d.status, "text/plain; charset=utf-8", std::string(word) + ": " + d.message + "\n"},
                    std::move(h));
    }
  }
  answer(route->second());
}

}  // namespace infergate::op::manager
