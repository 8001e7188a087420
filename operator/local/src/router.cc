// The local router: civetweb listeners that relay requests to ready pods over plain sockets.
#include "infergate/operator/local/router.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"

namespace infergate::op::local {
namespace {

constexpr size_t kMaxBody = 16u << 20;
constexpr size_t kMaxResponseHead = 64u << 10;
constexpr int kConnectTimeoutMs = 2000;
constexpr int kReadTimeoutMs = 600000;  // a long generation streams slowly; the client's own timeout rules

void send_error(mg_connection* conn, int status, std::string_view type, const std::string& message,
                std::optional<std::string> param = std::nullopt, int retry_after = 0) {
  Json body = {{"error",
                {{"message", message},
                 {"type", std::string(type)},
                 {"param", param ? Json(*param) : Json(nullptr)},
                 {"code", status}}}};
  std::string text = dump_json(body) + "\n";
  std::string extra = retry_after > 0 ? "Retry-After: " + std::to_string(retry_after) + "\r\n" : "";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%sConnection: "
            "close\r\n\r\n",
            status, mg_get_response_code_text(conn, status), text.size(), extra.c_str());
  mg_write(conn, text.data(), text.size());
}

void send_json(mg_connection* conn, int status, const Json& body) {
  std::string text = dump_json(body) + "\n";
  mg_printf(
      conn,
      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
      status, mg_get_response_code_text(conn, status), text.size());
  mg_write(conn, text.data(), text.size());
}

// Connects to host:port within the timeout; -1 on failure.
UniqueFd connect_to(const std::string& address) {
  auto hp = split_host_port(address);
  if (!hp.ok()) return UniqueFd();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(hp->first.c_str(), std::to_string(hp->second).c_str(), &hints, &res) != 0)
    return UniqueFd();
  UniqueFd out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) continue;
    int r = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno != EINPROGRESS) continue;
    if (r != 0) {
      pollfd p{fd.get(), POLLOUT, 0};
      if (::poll(&p, 1, kConnectTimeoutMs) != 1) continue;
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) continue;
    }
    out = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  return out;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, kReadTimeoutMs) != 1) return false;
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads what is available (blocking up to the timeout). 0 at EOF, -1 on error or timeout.
ssize_t recv_some(int fd, char* buf, size_t size) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, kReadTimeoutMs);
    if (r < 0 && errno == EINTR) continue;
    if (r != 1) return -1;
    ssize_t n = ::recv(fd, buf, size, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return n;
  }
}

bool header_is(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) !=
        std::tolower(static_cast<unsigned char>(name[i])))
      return false;
  }
  return true;
}

// The backend's response head with its connection-management headers replaced by "Connection: close"
// (each relayed request is one connection on both sides).
std::string rewrite_head(std::string_view head) {
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < head.size()) {
    size_t nl = head.find("\r\n", pos);
    if (nl == std::string_view::npos) nl = head.size();
    std::string_view line = head.substr(pos, nl - pos);
    pos = nl + 2;
    if (line.empty()) break;
    if (!first && (header_is(line, "Connection") || header_is(line, "Keep-Alive"))) continue;
    first = false;
    out.append(line).append("\r\n");
  }
  out += "Connection: close\r\n\r\n";
  return out;
}

enum class Relay { kDone, kUnreachable };

// Sends the request to one backend and relays its answer. kUnreachable when nothing was written to
// the client yet (the caller may try another pod).
Relay relay(mg_connection* conn, const std::string& backend, const std::string& method,
            const std::string& target, const std::string& content_type, const std::string& accept,
            const std::string& body) {
  UniqueFd fd = connect_to(backend);
  if (!fd.valid()) return Relay::kUnreachable;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + backend + "\r\n";
  if (!content_type.empty()) req += "Content-Type: " + content_type + "\r\n";
  if (!accept.empty()) req += "Accept: " + accept + "\r\n";
  if (method != "GET" && method != "HEAD") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "Connection: close\r\n\r\n";
  if (!send_all(fd.get(), req) || !send_all(fd.get(), body)) return Relay::kUnreachable;
  std::string head;
  char buf[16384];
  size_t end = std::string::npos;
  while (end == std::string::npos) {
    ssize_t n = recv_some(fd.get(), buf, sizeof buf);
    if (n <= 0) return Relay::kUnreachable;
    head.append(buf, static_cast<size_t>(n));
    end = head.find("\r\n\r\n");
    if (end == std::string::npos && head.size() > kMaxResponseHead) return Relay::kUnreachable;
  }
  std::string out = rewrite_head(std::string_view(head).substr(0, end + 4));
  if (mg_write(conn, out.data(), out.size()) <= 0) return Relay::kDone;
  std::string_view rest = std::string_view(head).substr(end + 4);
  if (!rest.empty() && mg_write(conn, rest.data(), rest.size()) <= 0) return Relay::kDone;
  for (;;) {
    ssize_t n = recv_some(fd.get(), buf, sizeof buf);
    if (n <= 0) break;
    if (mg_write(conn, buf, static_cast<size_t>(n)) <= 0) break;  // the client went away: drop the backend
  }
  return Relay::kDone;
}

std::string header(mg_connection* conn, const char* name) {
  const char* v = mg_get_header(conn, name);
  return v ? std::string(v) : std::string();
}

int handle(mg_connection* conn, void* data) {
  const auto* cfg = static_cast<const Router::Config*>(data);
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string method = info->request_method ? info->request_method : "";
  std::string path = info->local_uri ? info->local_uri : "/";
  std::string target = path;
  if (info->query_string) target += std::string("?") + info->query_string;

  if (cfg->endpoint.empty() && method == "GET" && path == "/healthz") {
    send_json(conn, 200, {{"status", "ok"}});
    return 200;
  }
  if (cfg->endpoint.empty() && method == "GET" && path == "/v1/models") {
    Json data_list = Json::array();
    for (const auto& name : cfg->list()) {
      data_list.push_back({{"id", name}, {"object", "model"}, {"owned_by", "infergate"}});
    }
    send_json(conn, 200, {{"object", "list"}, {"data", data_list}});
    return 200;
  }

  // The body, capped.
  std::string body;
  if (info->content_length > static_cast<long long>(kMaxBody)) {
    send_error(conn, 413, "invalid_request_error", "the request body is larger than 16 MiB");
    return 413;
  }
  char buf[16384];
  for (;;) {
    int n = mg_read(conn, buf, sizeof buf);
    if (n <= 0) break;
    body.append(buf, static_cast<size_t>(n));
    if (body.size() > kMaxBody) {
      send_error(conn, 413, "invalid_request_error", "the request body is larger than 16 MiB");
      return 413;
    }
  }

  std::string endpoint = cfg->endpoint;
  if (endpoint.empty()) {
    if (method != "POST") {
      send_error(conn, 404, "invalid_request_error",
                 "the router serves POST /v1/completions, POST /v1/chat/completions and GET /v1/models; " +
                     method + " " + path + " is not one of them");
      return 404;
    }
    auto j = parse_json(body, "request body");
    if (!j.ok() || !j->is_object()) {
      send_error(conn, 400, "invalid_request_error", "the request body is not a JSON object");
      return 400;
    }
    auto m = j->find("model");
    if (m == j->end() || !m->is_string() || m->get<std::string>().empty()) {
      send_error(conn, 400, "invalid_request_error",
                 "the router needs \"model\": the name of an InferenceModel", std::string("model"));
      return 400;
    }
    endpoint = m->get<std::string>();
  }
  std::optional<std::vector<std::string>> backends = cfg->resolve(endpoint);
  if (!backends) {
    send_error(conn, 404, "invalid_request_error", "the model '" + endpoint + "' does not exist",
               std::string("model"));
    return 404;
  }
  if (backends->empty()) {
    send_error(conn, 503, "unavailable", "the model '" + endpoint + "' has no ready replica yet",
               std::nullopt, 2);
    return 503;
  }
  thread_local std::mt19937 rng(std::random_device{}());
  std::shuffle(backends->begin(), backends->end(), rng);
  const std::string content_type = header(conn, "Content-Type");
  const std::string accept = header(conn, "Accept");
  for (const auto& b : *backends) {
    if (relay(conn, b, method, target, content_type, accept, body) == Relay::kDone) return 200;
    log::debug("router: a pod did not answer; trying another", {{"endpoint", endpoint}, {"pod", b}});
  }
  send_error(conn, 502, "unavailable", "no replica of '" + endpoint + "' answered");
  return 502;
}

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
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
  init_once();
  std::unique_ptr<Router> r(new Router());
  r->config_ = std::make_unique<Config>(std::move(config));
  r->host_ = hp.first == "0.0.0.0" ? "127.0.0.1" : hp.first;
  const std::string spec = hp.first + ":" + std::to_string(hp.second);
  const char* options[] = {"listening_ports",    spec.c_str(), "num_threads", "8",
                           "request_timeout_ms", "600000",     nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  r->ctx_ = mg_start(&callbacks, nullptr, options);
  if (!r->ctx_)
    return unavailable("the router cannot listen on " + bind + " (address in use or not allowed)");
  mg_set_request_handler(r->ctx_, "/", handle, r->config_.get());
  mg_server_port ports[4];
  int n = mg_get_server_ports(r->ctx_, 4, ports);
  if (n < 1) return internal_error("civetweb reports no listening port for " + bind);
  r->port_ = ports[0].port;
  return r;
}

Router::~Router() {
  if (!ctx_) return;
  // civetweb's listener notices mg_stop() only when its poll() times out; a connection of our own
  // wakes it at once (as the operator's probe endpoints do).
  std::atomic<bool> done{false};
  std::thread stopper([this, &done] {
    mg_stop(ctx_);
    done = true;
  });
  while (!done) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.valid()) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      (void)::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    for (int i = 0; i < 20 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stopper.join();
}

}  // namespace infergate::op::local
