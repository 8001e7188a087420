// The local router: the project's HTTP server in front of its client, relaying to ready pods.
#include "infergate/operator/local/router.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "infergate/common/json.h"
#include "infergate/common/log.h"

namespace infergate::op::local {
namespace {

constexpr size_t kMaxBody = 16u << 20;
// A long generation streams slowly; the client's own timeout rules, this only bounds a stuck pod.
constexpr std::chrono::seconds kRelayDeadline{600};
// Relays at once; more are answered 503 with Retry-After (each holds a thread while it streams).
constexpr size_t kMaxRelays = 64;
// A client slower than its pod: stop reading the pod while this much is queued for the client.
constexpr size_t kMaxQueuedForClient = 1u << 20;

// Hop-by-hop headers (RFC 9110, 7.6.1), and those each side's transport writes itself (framing,
// Content-Type passed on separately, Server): never copied across the relay.
bool not_relayed(const std::string& lower_name) {
  static const std::set<std::string> kNames = {"connection",
                                               "keep-alive",
                                               "proxy-authenticate",
                                               "proxy-authorization",
                                               "proxy-connection",
                                               "te",
                                               "trailer",
                                               "transfer-encoding",
                                               "upgrade",
                                               "host",
                                               "content-length",
                                               "expect",
                                               "content-type",
                                               "server"};
  return kNames.count(lower_name) > 0;
}

std::string error_body(int status, std::string_view type, const std::string& message,
                       std::optional<std::string> param = std::nullopt) {
  Json body = {{"error",
                {{"message", message},
                 {"type", std::string(type)},
                 {"param", param ? Json(*param) : Json(nullptr)},
                 {"code", status}}}};
  return dump_json(body) + "\n";
}

void send_error(const std::shared_ptr<http::Exchange>& ex, int status, std::string_view type,
                const std::string& message, std::optional<std::string> param = std::nullopt,
                int retry_after = 0) {
  http::Headers h;
  if (retry_after > 0) h.emplace_back("Retry-After", std::to_string(retry_after));
  ex->respond(http::Response{status, "application/json", std::move(h),
                             error_body(status, type, message, std::move(param))});
}

void send_json(const std::shared_ptr<http::Exchange>& ex, int status, const Json& body) {
  ex->respond(http::Response{status, "application/json", {}, dump_json(body) + "\n"});
}

}  // namespace

Result<std::pair<std::string, int>> split_host_port(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) {
    return invalid_argument("address \"" + address + "\": want host:port");
  }
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    return invalid_argument("address \"" + address + "\": the port must be a number from 0 to 65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  return std::make_pair(host, std::stoi(port));
}

Result<std::unique_ptr<Router>> Router::front_door(const std::string& bind, Resolver resolve, Lister list) {
  return start(bind, Config{"", std::move(resolve), std::move(list)});
}

Result<std::unique_ptr<Router>> Router::for_endpoint(const std::string& bind, const std::string& endpoint,
                                                     Resolver resolve) {
  return start(bind, Config{endpoint, std::move(resolve), {}});
}

Result<std::unique_ptr<Router>> Router::start(const std::string& bind, Config config) {
  INFERGATE_ASSIGN_OR_RETURN(auto hp, split_host_port(bind));
  std::unique_ptr<Router> r(new Router());
  r->config_ = std::move(config);
  r->host_ = hp.first == "0.0.0.0" ? "127.0.0.1" : hp.first;
  r->pool_ = std::make_unique<http::BlockingHandlers>(kMaxRelays);
  http::ServerOptions o;
  o.host = hp.first;
  o.port = hp.second;
  o.max_body_bytes = kMaxBody;
  o.request_timeout = std::chrono::seconds(60);
  o.write_timeout = std::chrono::seconds(60);
  o.server_name = "infergate-router";
  o.error_body = [](int status, std::string_view message, std::string_view) {
    if (status == 413)
      return error_body(413, "invalid_request_error", "the request body is larger than 16 MiB");
    return error_body(status, status >= 500 ? "unavailable" : "invalid_request_error", std::string(message));
  };
  Router* self = r.get();
  auto server = http::Server::start(
      std::move(o), r->pool_->wrap([self](std::shared_ptr<http::Exchange> ex) { self->handle(ex); }));
  if (!server.ok()) {
    return Error(ErrorCode::kUnavailable,
                 "the router cannot listen on " + bind + ": " + server.error().message(), "BindFailed");
  }
  r->server_ = std::move(*server);
  return r;
}

Router::~Router() {
  if (server_) server_->stop();  // relays see their clients gone and stop
  if (pool_) pool_->stop();
  server_.reset();
}

void Router::handle(const std::shared_ptr<http::Exchange>& ex) {
  const http::Request& req = ex->request();
  const Config& cfg = config_;
  if (cfg.endpoint.empty() && req.method == "GET" && req.path == "/healthz") {
    return send_json(ex, 200, {{"status", "ok"}});
  }
  if (cfg.endpoint.empty() && req.method == "GET" && req.path == "/v1/models") {
    Json data_list = Json::array();
    for (const auto& name : cfg.list())
      data_list.push_back({{"id", name}, {"object", "model"}, {"owned_by", "infergate"}});
    return send_json(ex, 200, {{"object", "list"}, {"data", data_list}});
  }
  std::string endpoint = cfg.endpoint;
  if (endpoint.empty()) {
    if (req.method != "POST") {
      return send_error(
          ex, 404, "invalid_request_error",
          "the router serves POST /v1/completions, POST /v1/chat/completions and GET /v1/models; " +
              req.method + " " + req.path + " is not one of them");
    }
    auto j = parse_json(req.body, "request body");
    if (!j.ok() || !j->is_object()) {
      return send_error(ex, 400, "invalid_request_error", "the request body is not a JSON object");
    }
    auto m = j->find("model");
    if (m == j->end() || !m->is_string() || m->get<std::string>().empty()) {
      return send_error(ex, 400, "invalid_request_error",
                        "the router needs \"model\": the name of an InferenceModel", std::string("model"));
    }
    endpoint = m->get<std::string>();
  }
  std::optional<std::vector<std::string>> backends = cfg.resolve(endpoint);
  if (!backends) {
    return send_error(ex, 404, "invalid_request_error", "the model '" + endpoint + "' does not exist",
                      std::string("model"));
  }
  if (backends->empty()) {
    return send_error(ex, 503, "unavailable", "the model '" + endpoint + "' has no ready replica yet",
                      std::nullopt, 2);
  }
  thread_local std::mt19937 rng(std::random_device{}());
  std::shuffle(backends->begin(), backends->end(), rng);
  for (const auto& b : *backends) {
    if (relay(ex, b) == Relay::kDone) return;
    log::debug("router: a pod did not answer; trying another", {{"endpoint", endpoint}, {"pod", b}});
  }
  send_error(ex, 502, "unavailable", "no replica of '" + endpoint + "' answered");
}

Result<std::shared_ptr<http::Client>> Router::client_for(const std::string& backend) {
  std::lock_guard lock(clients_mu_);
  auto it = clients_.find(backend);
  if (it != clients_.end()) return it->second;
  if (clients_.size() >= 256) clients_.clear();  // pods come and go: forget the old ones now and then
  http::ClientOptions o;
  o.base_url = "http://" + backend;
  o.timeout = kRelayDeadline;
  o.user_agent = "";  // the client's own User-Agent is relayed
  INFERGATE_ASSIGN_OR_RETURN(std::unique_ptr<http::Client> c, http::Client::create(std::move(o)));
  return clients_[backend] = std::shared_ptr<http::Client>(std::move(c));
}

Router::Relay Router::relay(const std::shared_ptr<http::Exchange>& ex, const std::string& backend) {
  const http::Request& in = ex->request();
  auto client = client_for(backend);
  if (!client.ok()) return Relay::kUnreachable;
  http::ClientRequest out;
  out.method = in.method;
  out.target = in.target;
  out.body = in.body;
  out.content_type = in.header("content-type");
  for (const auto& [k, v] : in.headers) {
    if (!not_relayed(k)) out.headers.emplace_back(k, v);
  }
  auto opened = (*client)->open(out);
  if (!opened.ok()) return Relay::kUnreachable;
  std::unique_ptr<http::ResponseStream> pod = std::move(*opened);
  http::Headers headers;
  for (const auto& [k, v] : pod->headers()) {
    if (!not_relayed(k)) headers.emplace_back(k, v);
  }
  if (auto length = pod->content_length()) {
    ex->start_sized(pod->status(), pod->header("content-type"), *length, std::move(headers));
  } else {
    ex->start_stream(pod->status(), pod->header("content-type"), std::move(headers));
  }
  for (;;) {
    if (ex->disconnected()) {
      pod->cancel();  // the client went away: so does the pod's request (its generation is cancelled)
      return Relay::kDone;
    }
    auto piece = pod->read();
    if (!piece.ok()) {
      ex->abort();  // the pod broke off: the client must see the response cut, not complete
      return Relay::kDone;
    }
    if (!*piece) break;
    ex->write(std::move(**piece));
    while (ex->pending_bytes() > kMaxQueuedForClient && !ex->disconnected())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ex->finish();
  return Relay::kDone;
}

}  // namespace infergate::op::local
