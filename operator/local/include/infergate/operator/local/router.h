// The local router: what a Kubernetes Service is for the local platform. It listens on loopback and
// forwards each HTTP request to one ready pod of an endpoint, chosen at random among them, so traffic
// splits by replica count between stable and canary pods (a canary pod receives requests only once
// it is ready, because only ready pods are offered).
//
// Two kinds of listener:
//  - the front door (one per operator, e.g. 127.0.0.1:8080): OpenAI requests are routed by the
//    "model" field of their JSON body to the endpoint of that name (an InferenceModel's name), and
//    GET /v1/models lists the models that have an endpoint;
//  - an endpoint listener (one per endpoint, its own port, like a ClusterIP): every request goes to
//    that endpoint's pods whatever it asks for (the rollout's quality check talks to stable and
//    canary through these).
// Both are the project's HTTP server (infergate/http/server.h) in front of its client
// (infergate/http/client.h): requests are read whole (the model name is in the body), sent on with
// their end-to-end headers, and responses relayed as they arrive (server-sent event streams pass
// through unbuffered; a client that goes away cancels the pod's request). Errors of the router itself
// are OpenAI-shaped: {"error":{"message","type","param","code"}} with 400 (no or bad model field), 404
// (unknown model), 413 (body over 16 MiB), 502 (no pod answered), 503 (no ready pod, with Retry-After).
// Thread-safe; the resolver is called concurrently from the listener's threads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/http/client.h"
#include "infergate/http/server.h"

namespace infergate::op::local {

class Router {
 public:
  // The "host:port" addresses of the ready pods behind an endpoint; nullopt when there is no such
  // endpoint.
  using Resolver = std::function<std::optional<std::vector<std::string>>(const std::string& endpoint)>;
  // The endpoint names the front door lists in /v1/models.
  using Lister = std::function<std::vector<std::string>()>;

  // A front door on `bind` ("127.0.0.1:8080"; port 0 picks one).
  static Result<std::unique_ptr<Router>> front_door(const std::string& bind, Resolver resolve, Lister list);
  // A listener for one endpoint.
  static Result<std::unique_ptr<Router>> for_endpoint(const std::string& bind, const std::string& endpoint,
                                                      Resolver resolve);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  int port() const { return server_->port(); }
  const std::string& host() const { return host_; }
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port()); }

 private:
  struct Config {
    std::string endpoint;  // "" for the front door
    Resolver resolve;
    Lister list;
  };
  enum class Relay { kDone, kUnreachable };

  Router() = default;
  static Result<std::unique_ptr<Router>> start(const std::string& bind, Config config);
  void handle(const std::shared_ptr<http::Exchange>& ex);
  // Sends the request to one pod and relays its answer. kUnreachable when nothing was written to the
  // client yet (the caller may try another pod).
  Relay relay(const std::shared_ptr<http::Exchange>& ex, const std::string& backend);
  Result<std::shared_ptr<http::Client>> client_for(const std::string& backend);

  Config config_;
  std::string host_;
  std::mutex clients_mu_;
  std::map<std::string, std::shared_ptr<http::Client>> clients_;  // one per pod address, reused
  std::unique_ptr<http::BlockingHandlers> pool_;                  // a relay blocks while it streams
  std::unique_ptr<http::Server> server_;
};

// "host:port" -> (host, port). Errors name the text.
Result<std::pair<std::string, int>> split_host_port(const std::string& address);

}  // namespace infergate::op::local
