// HTTP layer benchmark: the project's HTTP server (Boost.Beast over Asio, http/: infergate::http::Server,
// which the runtime, the operator and the local router use) against a minimal cpprestsdk http_listener,
// serving the same two trivial endpoints (GET /healthz and a small POST /echo that returns its body), driven
// by the same loopback client (keep-alive HTTP/1.1 over raw sockets, one connection per client thread, closed
// loop) at concurrency 1 and 16. Prints requests/s, p50 and p99 latency per point and the Beast / cpprestsdk
// ratios measured in the same run. No model is involved: this isolates the HTTP layer.
//
// Usage: http_layer_bench [--seconds S] [--io-threads N] [--json FILE]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cpprest/http_listener.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/http/server.h"

namespace srv = infergate::http;
using infergate::Json;
using Clock = std::chrono::steady_clock;

namespace {

// ---- the client: keep-alive HTTP/1.1 on a raw socket (the same bytes for both servers) ----------------

class Connection {
 public:
  explicit Connection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close_fd();
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{10, 0};  // a stuck server fails the request instead of hanging the benchmark
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Connection() { close_fd(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  bool ok() const { return fd_ >= 0; }

  // Sends `request` and reads one response with a Content-Length body; true on a 200 whose body
  // equals `expect_body` when given.
  bool roundtrip(const std::string& request, const std::string* expect_body) {
    if (fd_ < 0) return false;
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return fail();
      sent += static_cast<size_t>(n);
    }
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return fail();
    }
    const std::string head = buf_.substr(0, head_end);
    std::string lower(head);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const size_t cl = lower.find("\r\ncontent-length:");
    if (head.compare(0, 12, "HTTP/1.1 200") != 0 || cl == std::string::npos) return fail();
    const size_t length = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
    while (buf_.size() < head_end + 4 + length) {
      if (!fill()) return fail();
    }
    const bool good = !expect_body || buf_.compare(head_end + 4, length, *expect_body) == 0;
    buf_.erase(0, head_end + 4 + length);
    return good;
  }

 private:
  bool fill() {
    char tmp[16384];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool fail() {
    close_fd();
    return false;
  }
  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string buf_;
};

struct Point {
  double requests_per_second = 0;
  double p50_ms = 0, p99_ms = 0;
  int64_t requests = 0, errors = 0;
};

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];  // nearest rank
}

// `clients` threads, each on its own keep-alive connection, send `request` back to back for `seconds`
// (after a short warm-up that is not counted).
Point drive(int port, const std::string& request, const std::string* expect_body, int clients,
            double seconds) {
  std::atomic<int64_t> errors{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point end;
  std::vector<std::thread> pool;
  for (int c = 0; c < clients; ++c) {
    pool.emplace_back([&, c] {
      auto conn = std::make_unique<Connection>(port);
      for (int i = 0; i < 20 && conn->ok(); ++i) conn->roundtrip(request, expect_body);  // warm-up
      ++ready;
      while (!go.load()) std::this_thread::yield();
      auto& mine = lat[static_cast<size_t>(c)];
      while (Clock::now() < end) {
        if (!conn->ok()) {  // the server closed it: count an error and reconnect
          ++errors;
          conn = std::make_unique<Connection>(port);
          continue;
        }
        const auto t0 = Clock::now();
        if (conn->roundtrip(request, expect_body)) {
          mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        } else {
          ++errors;
        }
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto start = Clock::now();
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Point p;
  p.requests = static_cast<int64_t>(all.size());
  p.errors = errors.load();
  p.requests_per_second = static_cast<double>(all.size()) / wall;
  p.p50_ms = percentile(all, 0.50);
  p.p99_ms = percentile(all, 0.99);
  return p;
}

// ---- the two servers ------------------------------------------------------------------------------

// The project's HTTP server with the two trivial routes.
std::unique_ptr<srv::Server> start_beast(int io_threads) {
  srv::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = io_threads;
  auto s = srv::Server::start(o, [](std::shared_ptr<srv::Exchange> ex) {
    const srv::Request& r = ex->request();
    srv::Response resp;
    if (r.method == "GET" && r.path == "/healthz") {
      resp.body = R"({"status":"ok"})";
    } else if (r.method == "POST" && r.path == "/echo") {
      resp.body = r.body;
    } else {
      resp.status = 404;
      resp.body = R"({"error":"not found"})";
    }
    ex->respond(std::move(resp));
  });
  if (!s.ok()) {
    std::fprintf(stderr, "beast server: %s\n", s.error().to_string().c_str());
    return nullptr;
  }
  return std::move(s).value();
}

// A port free right now (cpprestsdk's listener takes no port 0 and cannot tell which one it got).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

using web::http::experimental::listener::http_listener;

// A minimal cpprestsdk listener with the same routes; exceptions stay inside (converted to a message).
class CpprestServer {
 public:
  bool start(int port) {
    port_ = port;
    try {
      listener_ = std::make_unique<http_listener>("http://127.0.0.1:" + std::to_string(port) + "/");
      listener_->support([](web::http::http_request req) {
        const std::string path = req.relative_uri().path();
        if (req.method() == web::http::methods::GET && path == "/healthz") {
          req.reply(web::http::status_codes::OK, std::string(R"({"status":"ok"})"), "application/json");
        } else if (req.method() == web::http::methods::POST && path == "/echo") {
          req.extract_utf8string(true).then([req](pplx::task<std::string> body) mutable {
            try {
              req.reply(web::http::status_codes::OK, body.get(), "application/json");
            } catch (const std::exception&) {
              req.reply(web::http::status_codes::BadRequest);
            }
          });
        } else {
          req.reply(web::http::status_codes::NotFound);
        }
      });
      listener_->open().wait();
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cpprestsdk listener on port %d: %s\n", port, e.what());
      return false;
    }
  }
  void stop() {
    try {
      if (listener_) listener_->close().wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "closing the cpprestsdk listener: %s\n", e.what());
    }
    listener_.reset();
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<http_listener> listener_;
  int port_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3.0;
  int io_threads = 2;
  std::string json_out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) {
      seconds = std::atof(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--io-threads")) {
      io_threads = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json_out = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "unknown flag %s\nusage: http_layer_bench [--seconds S] [--io-threads N] [--json FILE]\n",
                   argv[i]);
      return 2;
    }
  }
  if (!(seconds > 0) || io_threads < 1) {
    std::fprintf(stderr, "--seconds must be positive and --io-threads at least 1\n");
    return 2;
  }
  infergate::log::set_level(infergate::log::Level::kWarn);

  auto beast = start_beast(io_threads);
  CpprestServer cpprest;
  const int cport = free_port();
  if (!beast || cport <= 0 || !cpprest.start(cport)) return 1;

  const std::string echo_body =
      R"({"model":"tiny","prompt":"The quick brown fox jumps over the lazy dog.","max_tokens":16,)"
      R"("temperature":0,"logprobs":5,"seed":42,"stop":["\n\n"],"user":"benchmark-client-0001"})";
  struct Endpoint {
    const char* name;
    std::string request;
    const std::string* expect;
  };
  const std::string health_body = R"({"status":"ok"})";
  const std::vector<Endpoint> endpoints = {
      {"GET /healthz", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &health_body},
      {"POST /echo",
       "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(echo_body.size()) + "\r\n\r\n" + echo_body,
       &echo_body},
  };

  std::printf(
      "== HTTP layer: keep-alive loopback clients, closed loop, %.1f s per point; Beast with %d I/O "
      "threads, cpprestsdk with its default thread pool\n",
      seconds, io_threads);
  std::printf("%-14s %5s  %-10s %12s %9s %9s %7s   %-22s\n", "endpoint", "conc", "server", "requests/s",
              "p50 ms", "p99 ms", "errors", "beast/cpprest");
  Json report = Json::array();
  for (const auto& ep : endpoints) {
    for (int conc : {1, 16}) {
      const Point c = drive(cpprest.port(), ep.request, ep.expect, conc, seconds);
      const Point b = drive(beast->port(), ep.request, ep.expect, conc, seconds);
      std::printf("%-14s %5d  %-10s %12.0f %9.3f %9.3f %7lld\n", ep.name, conc, "cpprestsdk",
                  c.requests_per_second, c.p50_ms, c.p99_ms, static_cast<long long>(c.errors));
      const double rps_ratio = c.requests_per_second > 0 ? b.requests_per_second / c.requests_per_second : 0;
      const double p99_ratio = c.p99_ms > 0 ? b.p99_ms / c.p99_ms : 0;
      std::printf("%-14s %5d  %-10s %12.0f %9.3f %9.3f %7lld   req/s %.2fx, p99 %.2fx\n", ep.name, conc,
                  "beast", b.requests_per_second, b.p50_ms, b.p99_ms, static_cast<long long>(b.errors),
                  rps_ratio, p99_ratio);
      for (const auto& [name, p] : {std::pair<const char*, const Point&>{"cpprestsdk", c}, {"beast", b}}) {
        report.push_back({{"endpoint", ep.name},
                          {"concurrency", conc},
                          {"server", name},
                          {"requests_per_second", p.requests_per_second},
                          {"p50_ms", p.p50_ms},
                          {"p99_ms", p.p99_ms},
                          {"requests", p.requests},
                          {"errors", p.errors}});
      }
    }
  }
  cpprest.stop();
  beast->stop();
  if (!json_out.empty()) {
    auto w = infergate::write_file_atomic(json_out, infergate::dump_json(report, 2) + "\n");
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.error().to_string().c_str());
      return 1;
    }
  }
  return 0;
}
