// civetweb-backed endpoints for probes and metrics.
#include "infergate/operator/manager/http_endpoints.h"

#include <civetweb.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace infergate::op::manager {
namespace {

int handle(mg_connection* conn, void* data) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* route = static_cast<HttpEndpoints::Route*>(data);
  HttpAnswer a;
  if (std::strcmp(info->request_method, "GET") != 0 && std::strcmp(info->request_method, "HEAD") != 0) {
    a = HttpAnswer{405, "text/plain; charset=utf-8", "method not allowed\n"};
  } else {
    a = route->handler();
  }
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-cache\r\n\r\n",
            a.status, mg_get_response_code_text(conn, a.status), a.content_type.c_str(), a.body.size());
  if (std::strcmp(info->request_method, "HEAD") != 0) mg_write(conn, a.body.data(), a.body.size());
  return a.status;
}

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

}  // namespace

Result<std::string> civetweb_listen_spec(const std::string& bind) {
  if (bind.empty()) return invalid_argument("empty bind address");
  auto colon = bind.rfind(':');
  if (colon == std::string::npos) return invalid_argument("bind address \"" + bind + "\": want [host]:port");
  std::string host = bind.substr(0, colon), port = bind.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    return invalid_argument("bind address \"" + bind + "\": the port must be a number from 0 to 65535");
  }
  if (host.empty()) host = "0.0.0.0";
  return host + ":" + port;
}

Result<std::unique_ptr<HttpEndpoints>> HttpEndpoints::start(const std::string& bind_address,
                                                            std::map<std::string, HttpGetHandler> handlers) {
  if (bind_address == "0") return std::unique_ptr<HttpEndpoints>();
  INFERGATE_ASSIGN_OR_RETURN(std::string spec, civetweb_listen_spec(bind_address));
  init_once();
  std::unique_ptr<HttpEndpoints> s(new HttpEndpoints());
  const char* options[] = {"listening_ports",    spec.c_str(), "num_threads", "4",
                           "request_timeout_ms", "10000",      nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  s->ctx_ = mg_start(&callbacks, nullptr, options);
  if (!s->ctx_) return unavailable("cannot listen on " + bind_address + " (address in use or not allowed)");
  for (auto& [path, fn] : handlers) {
    auto route = std::make_unique<Route>(Route{std::move(fn)});
    mg_set_request_handler(s->ctx_, (path + "$").c_str(), handle, route.get());
    s->routes_[path] = std::move(route);
  }
  mg_server_port ports[4];
  int n = mg_get_server_ports(s->ctx_, 4, ports);
  if (n < 1) return internal_error("civetweb reports no listening port for " + bind_address);
  s->port_ = ports[0].port;
  return s;
}

HttpEndpoints::~HttpEndpoints() {
  if (!ctx_) return;
  // civetweb's listener notices mg_stop() only when its poll() times out (two seconds). A connection
  // of our own wakes it at once, so shutting down (and every test that starts and stops an operator)
  // does not wait for that timeout.
  std::atomic<bool> done{false};
  std::thread stopper([this, &done] {
    mg_stop(ctx_);
    done = true;
  });
  while (!done) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      ::close(fd);
    }
    for (int i = 0; i < 20 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stopper.join();
}

}  // namespace infergate::op::manager
