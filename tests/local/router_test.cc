// The local router: routing by model name, replica-weighted choice, streaming relay, errors.
#include "infergate/operator/local/router.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::op::local {
namespace {

using namespace std::chrono_literals;

// A minimal backend: answers every request with its own name and what it received; /stream sends
// three chunks with pauses, unbuffered.
class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)) {
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "4", nullptr};
    mg_callbacks cb;
    std::memset(&cb, 0, sizeof cb);
    ctx_ = mg_start(&cb, nullptr, options);
    mg_set_request_handler(ctx_, "/", &Backend::handle, this);
    mg_server_port ports[2];
    mg_get_server_ports(ctx_, 2, ports);
    port_ = ports[0].port;
  }
  ~Backend() { mg_stop(ctx_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int hits() const { return hits_.load(); }

 private:
  static int handle(mg_connection* c, void* data) {
    auto* self = static_cast<Backend*>(data);
    self->hits_++;
    const mg_request_info* ri = mg_get_request_info(c);
    std::string body;
    char buf[4096];
    int n;
    while ((n = mg_read(c, buf, sizeof buf)) > 0) body.append(buf, n);
    if (std::string(ri->local_uri) == "/stream") {
      mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
      for (int i = 0; i < 3; ++i) {
        mg_printf(c, "data: %d\n\n", i);
        std::this_thread::sleep_for(50ms);
      }
      mg_printf(c, "data: [DONE]\n\n");
      return 200;
    }
    Json j = {
        {"backend", self->name_}, {"method", ri->request_method}, {"path", ri->local_uri}, {"body", body}};
    std::string out = dump_json(j);
    mg_printf(c,
              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
              "keep-alive\r\n\r\n",
              out.size());
    mg_write(c, out.data(), out.size());
    return 200;
  }
  std::string name_;
  mg_context* ctx_;
  int port_ = 0;
  std::atomic<int> hits_{0};
};

struct Response {
  int status = 0;
  std::string head;
  std::string body;
};

// A raw HTTP/1.1 client (one request per connection), so the test depends on nothing of ours.
Response request(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Response r;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  std::string req = method + " " + path +
                    " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)!::write(fd, req.data(), req.size());
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) all.append(buf, n);
  ::close(fd);
  auto end = all.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  if (r.head.size() > 12) r.status = std::stoi(r.head.substr(9, 3));
  return r;
}

struct Table {
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> endpoints;
  Router::Resolver resolver() {
    return [this](const std::string& name) -> std::optional<std::vector<std::string>> {
      std::lock_guard lock(mu);
      auto it = endpoints.find(name);
      if (it == endpoints.end()) return std::nullopt;
      return it->second;
    };
  }
  Router::Lister lister() {
    return [this] {
      std::lock_guard lock(mu);
      std::vector<std::string> out;
      for (const auto& [k, v] : endpoints) out.push_back(k);
      return out;
    };
  }
};

TEST(Router, RoutesACompletionToTheModelNamedInTheBody) {
  Backend a("a"), b("b");
  Table t;
  t.endpoints["alpha"] = {a.address()};
  t.endpoints["beta"] = {b.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  Response res = request((*r)->port(), "POST", "/v1/completions", R"({"model":"beta","prompt":"hi"})");
  ASSERT_EQ(res.status, 200) << res.head;
  auto j = parse_json(res.body, "body");
  ASSERT_TRUE(j.ok()) << res.body;
  EXPECT_EQ((*j)["backend"], "b");
  EXPECT_EQ((*j)["path"], "/v1/completions");
  EXPECT_EQ((*j)["body"], R"({"model":"beta","prompt":"hi"})");
  EXPECT_NE(res.head.find("Connection: close"), std::string::npos);
  EXPECT_EQ(res.head.find("keep-alive"), std::string::npos);
}

TEST(Router, SplitsTrafficAcrossReadyReplicasByCount) {
  Backend s1("stable-1"), s2("stable-2"), s3("stable-3"), c1("canary-1");
  Table t;
  t.endpoints["m"] = {s1.address(), s2.address(), s3.address(), c1.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  std::map<std::string, int> by;
  const int n = 400;
  for (int i = 0; i < n; ++i) {
    Response res = request((*r)->port(), "POST", "/v1/completions", R"({"model":"m"})");
    ASSERT_EQ(res.status, 200);
    by[(*parse_json(res.body, "b"))["backend"].get<std::string>()]++;
  }
  // One of four replicas is the canary: about a quarter of the requests (binomial, 6 sigma wide).
  EXPECT_GT(by["canary-1"], 100 - 52);
  EXPECT_LT(by["canary-1"], 100 + 52);
  EXPECT_EQ(by["stable-1"] + by["stable-2"] + by["stable-3"] + by["canary-1"], n);
}

TEST(Router, AnswersOpenAiShapedErrorsForWhatItCannotRoute) {
  Table t;
  t.endpoints["cold"] = {};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  const int port = (*r)->port();
  Response unknown = request(port, "POST", "/v1/completions", R"({"model":"nope"})");
  EXPECT_EQ(unknown.status, 404);
  auto j = parse_json(unknown.body, "b");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["error"]["param"], "model");
  EXPECT_NE((*j)["error"]["message"].get<std::string>().find("nope"), std::string::npos);

  Response cold = request(port, "POST", "/v1/completions", R"({"model":"cold"})");
  EXPECT_EQ(cold.status, 503);
  EXPECT_NE(cold.head.find("Retry-After: 2"), std::string::npos);

  EXPECT_EQ(request(port, "POST", "/v1/completions", R"({"prompt":"x"})").status, 400);
  EXPECT_EQ(request(port, "POST", "/v1/completions", "not json").status, 400);
}

TEST(Router, SaysBadGatewayWhenNoReplicaAnswers) {
  Table t;
  t.endpoints["m"] = {"127.0.0.1:1"};  // nothing listens on port 1
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(request((*r)->port(), "POST", "/v1/completions", R"({"model":"m"})").status, 502);
}

TEST(Router, ListsItsModels) {
  Table t;
  t.endpoints["m1"] = {};
  t.endpoints["m2"] = {};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  Response res = request((*r)->port(), "GET", "/v1/models");
  ASSERT_EQ(res.status, 200);
  auto j = parse_json(res.body, "b");
  ASSERT_TRUE(j.ok());
  ASSERT_EQ((*j)["data"].size(), 2u);
  EXPECT_EQ((*j)["data"][0]["id"], "m1");
}

TEST(Router, AnEndpointListenerForwardsEveryRequestToItsOwnPods) {
  Backend a("a");
  Table t;
  t.endpoints["m-canary"] = {a.address()};
  auto r = Router::for_endpoint("127.0.0.1:0", "m-canary", t.resolver());
  ASSERT_TRUE(r.ok());
  Response metrics = request((*r)->port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ((*parse_json(metrics.body, "b"))["path"], "/metrics");
  Response post = request((*r)->port(), "POST", "/v1/chat/completions", R"({"model":"whatever"})");
  EXPECT_EQ((*parse_json(post.body, "b"))["backend"], "a");
}

TEST(Router, RelaysAStreamAsItArrives) {
  Backend a("a");
  Table t;
  t.endpoints["m"] = {a.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  Response res = request((*r)->port(), "POST", "/stream", R"({"model":"m","stream":true})");
  ASSERT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n");
  EXPECT_NE(res.head.find("text/event-stream"), std::string::npos);
}

TEST(Router, RefusesABindAddressItCannotUse) {
  Table t;
  auto first = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(first.ok());
  auto second = Router::front_door("127.0.0.1:" + std::to_string((*first)->port()), t.resolver(), t.lister());
  EXPECT_FALSE(second.ok());
  EXPECT_FALSE(Router::front_door("nonsense", t.resolver(), t.lister()).ok());
}

}  // namespace
}  // namespace infergate::op::local
