// Router benchmark: what the local router adds to a request. A stand-in pod (the project's HTTP server,
// answering at once) is asked the same requests directly and through the router's front door, in the
// same run: a small completion (whole response) and a streamed one (time to the first event, which is
// what a user sees as TTFT), at concurrency 1 and 8. Prints p50 and p99 per path and the router/direct
// ratios and added microseconds. The load generator writes HTTP/1.1 on raw sockets, one request per
// connection, so that the router is measured and not a client library (as http_layer_bench does).
//
// Usage: router_bench [--seconds S] [--json FILE]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/http/server.h"
#include "infergate/operator/local/router.h"

using infergate::Json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kBody = R"({"model":"m","prompt":"The quick brown fox","max_tokens":16})";
constexpr const char* kAnswer =
    R"({"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":" jumps over the lazy dog","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":16}})";

// The stand-in pod: a completion answered whole, or streamed as three server-sent events.
std::unique_ptr<infergate::http::Server> start_pod() {
  auto s = infergate::http::Server::start({}, [](std::shared_ptr<infergate::http::Exchange> ex) {
    if (ex->request().path == "/v1/stream") {
      ex->start_stream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) ex->write(std::string("data: ") + kAnswer + "\n\n");
      ex->write("data: [DONE]\n\n");
      ex->finish();
      return;
    }
    ex->respond({200, "application/json", {}, kAnswer});
  });
  if (!s.ok()) {
    std::fprintf(stderr, "pod: %s\n", s.error().to_string().c_str());
    return nullptr;
  }
  return std::move(*s);
}

// One request on a fresh connection. Returns the milliseconds to the first body byte (`first`) and to
// the end of the response (the server closes: Connection: close); false unless a 200 came whole.
bool one_request(int port, const std::string& path, double* first_ms, double* total_ms) {
  const auto t0 = Clock::now();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string body = kBody;
  const std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  bool ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  std::string in;
  bool seen_body = false;
  char buf[16384];
  while (ok) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) ok = false;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (!seen_body) {
      const size_t head = in.find("\r\n\r\n");
      if (head != std::string::npos && in.size() > head + 4) {
        seen_body = true;
        *first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
    }
  }
  ::close(fd);
  *total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return ok && seen_body && in.compare(0, 12, "HTTP/1.1 200") == 0 &&
         in.find("jumps over") != std::string::npos;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

struct Point {
  std::vector<double> first, total;
  int64_t errors = 0;
};

// `clients` threads send requests back to back for `seconds` after a warm-up that is not counted.
Point drive(int port, const std::string& path, int clients, double seconds) {
  std::vector<Point> per(static_cast<size_t>(clients));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point end;
  std::vector<std::thread> pool;
  for (int c = 0; c < clients; ++c) {
    pool.emplace_back([&, c] {
      double f, t;
      for (int i = 0; i < 20; ++i) (void)one_request(port, path, &f, &t);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      Point& mine = per[static_cast<size_t>(c)];
      while (Clock::now() < end) {
        if (one_request(port, path, &f, &t)) {
          mine.first.push_back(f);
          mine.total.push_back(t);
        } else {
          ++mine.errors;
        }
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (auto& t : pool) t.join();
  Point all;
  for (auto& p : per) {
    all.first.insert(all.first.end(), p.first.begin(), p.first.end());
    all.total.insert(all.total.end(), p.total.begin(), p.total.end());
    all.errors += p.errors;
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::string json_out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: router_bench [--seconds S] [--json FILE]\n");
      return 2;
    }
  }
  infergate::log::set_level(infergate::log::Level::kWarn);
  auto pod = start_pod();
  if (!pod) return 1;
  const std::string address = "127.0.0.1:" + std::to_string(pod->port());
  auto router = infergate::op::local::Router::front_door(
      "127.0.0.1:0",
      [&](const std::string& name) -> std::optional<std::vector<std::string>> {
        if (name != "m") return std::nullopt;
        return std::vector<std::string>{address};
      },
      [] { return std::vector<std::string>{"m"}; });
  if (!router.ok()) {
    std::fprintf(stderr, "router: %s\n", router.error().to_string().c_str());
    return 1;
  }
  struct Case {
    const char* name;
    const char* path;
    bool first_event;  // judge by the first body byte (a stream's first event) rather than the end
  };
  const Case cases[] = {{"completion", "/v1/completions", false}, {"stream TTFE", "/v1/stream", true}};
  std::printf("router_bench: %.1f s per point; one request per connection; pod answers at once\n", seconds);
  std::printf("%-12s %5s %-8s %9s %9s %9s %7s   %s\n", "request", "conc", "path", "req/s", "p50 ms", "p99 ms",
              "errors", "router/direct (p50, p99; added p50)");
  Json report = Json::array();
  for (const Case& c : cases) {
    for (int conc : {1, 8}) {
      const Point direct = drive(pod->port(), c.path, conc, seconds);
      const Point routed = drive((*router)->port(), c.path, conc, seconds);
      auto pick = [&](const Point& p) { return c.first_event ? p.first : p.total; };
      const double d50 = percentile(pick(direct), 0.5), d99 = percentile(pick(direct), 0.99);
      const double r50 = percentile(pick(routed), 0.5), r99 = percentile(pick(routed), 0.99);
      std::printf("%-12s %5d %-8s %9.0f %9.3f %9.3f %7lld\n", c.name, conc, "direct",
                  static_cast<double>(direct.total.size()) / seconds, d50, d99,
                  static_cast<long long>(direct.errors));
      std::printf("%-12s %5d %-8s %9.0f %9.3f %9.3f %7lld   %.2fx, %.2fx; +%.0f us\n", c.name, conc, "router",
                  static_cast<double>(routed.total.size()) / seconds, r50, r99,
                  static_cast<long long>(routed.errors), d50 > 0 ? r50 / d50 : 0.0, d99 > 0 ? r99 / d99 : 0.0,
                  (r50 - d50) * 1000);
      report.push_back({{"request", c.name},
                        {"concurrency", conc},
                        {"direct", {{"p50_ms", d50}, {"p99_ms", d99}, {"errors", direct.errors}}},
                        {"router", {{"p50_ms", r50}, {"p99_ms", r99}, {"errors", routed.errors}}},
                        {"p50_ratio", d50 > 0 ? r50 / d50 : 0.0},
                        {"p99_ratio", d99 > 0 ? r99 / d99 : 0.0}});
    }
  }
  if (!json_out.empty()) (void)infergate::write_file_atomic(json_out, infergate::dump_json(report, 2));
  return 0;
}
