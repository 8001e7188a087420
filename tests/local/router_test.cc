// The local router: routing by model name, replica-weighted choice, streaming relay, errors.
#include "infergate/operator/local/router.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "common/eventually.h"
#include "infergate/common/json.h"
#include "infergate/http/client.h"
#include "infergate/http/server.h"

namespace infergate::op::local {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;

// A minimal backend: answers every request with its own name and what it received; /stream sends
// three events with pauses (chunked, unbuffered), /cut breaks off mid-body.
class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)), pool_(8) {
    auto s = http::Server::start({}, pool_.wrap([this](std::shared_ptr<http::Exchange> ex) { handle(ex); }));
    EXPECT_TRUE(s.ok());
    server_ = std::move(*s);
  }
  ~Backend() {
    server_->stop();
    pool_.stop();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  int hits() const { return hits_.load(); }
  bool saw_disconnect() const { return disconnected_.load(); }

 private:
  void handle(const std::shared_ptr<http::Exchange>& ex) {
    hits_++;
    const http::Request& r = ex->request();
    if (r.path == "/stream" || r.path == "/endless") {
      ex->start_stream(200, "text/event-stream", {{"X-Backend", name_}});
      for (int i = 0; r.path == "/endless" || i < 3; ++i) {
        if (ex->disconnected()) {
          disconnected_ = true;
          return;
        }
        ex->write("data: " + std::to_string(i) + "\n\n");
        std::this_thread::sleep_for(50ms);
      }
      ex->write("data: [DONE]\n\n");
      ex->finish();
      return;
    }
    if (r.path == "/cut") {
      ex->start_sized(200, "text/plain", 100);
      ex->write("only part");
      ex->abort();
      return;
    }
    Json j = {{"backend", name_},
              {"method", r.method},
              {"path", r.path},
              {"body", r.body},
              {"authorization", r.header("authorization")}};
    ex->respond({200, "application/json", {{"X-Backend", name_}, {"Keep-Alive", "timeout=5"}}, dump_json(j)});
  }
  std::string name_;
  std::atomic<int> hits_{0};
  std::atomic<bool> disconnected_{false};
  http::BlockingHandlers pool_;
  std::unique_ptr<http::Server> server_;
};

http::ClientResponse request(int port, const std::string& method, const std::string& path,
                             const std::string& body = "", http::Headers headers = {}) {
  http::ClientRequest r;
  r.method = method;
  r.body = body;
  if (method == "POST") r.content_type = "application/json";
  r.headers = std::move(headers);
  r.timeout = 30s;
  auto got = http::fetch("http://127.0.0.1:" + std::to_string(port) + path, r);
  EXPECT_TRUE(got.ok()) << got.error().to_string();
  return got.ok() ? *got : http::ClientResponse{};
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
  auto res = request((*r)->port(), "POST", "/v1/completions", R"({"model":"beta","prompt":"hi"})",
                     {{"Authorization", "Bearer user-key"}});
  ASSERT_EQ(res.status, 200) << res.body;
  auto j = parse_json(res.body, "body");
  ASSERT_TRUE(j.ok()) << res.body;
  EXPECT_EQ((*j)["backend"], "b");
  EXPECT_EQ((*j)["path"], "/v1/completions");
  EXPECT_EQ((*j)["body"], R"({"model":"beta","prompt":"hi"})");
  EXPECT_EQ((*j)["authorization"], "Bearer user-key");  // end-to-end headers travel on
  EXPECT_EQ(res.header("x-backend"), "b");
  EXPECT_EQ(res.header("keep-alive"), "");  // hop-by-hop headers do not
  EXPECT_EQ(res.header("server"), "infergate-router");
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
    auto res = request((*r)->port(), "POST", "/v1/completions", R"({"model":"m"})");
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
  auto unknown = request(port, "POST", "/v1/completions", R"({"model":"nope"})");
  EXPECT_EQ(unknown.status, 404);
  auto j = parse_json(unknown.body, "b");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["error"]["param"], "model");
  EXPECT_NE((*j)["error"]["message"].get<std::string>().find("nope"), std::string::npos);

  auto cold = request(port, "POST", "/v1/completions", R"({"model":"cold"})");
  EXPECT_EQ(cold.status, 503);
  EXPECT_EQ(cold.header("retry-after"), "2");

  EXPECT_EQ(request(port, "POST", "/v1/completions", R"({"prompt":"x"})").status, 400);
  EXPECT_EQ(request(port, "POST", "/v1/completions", "not json").status, 400);
}

TEST(Router, SaysBadGatewayWhenNoReplicaAnswers) {
  Table t;
  t.endpoints["m"] = {"127.0.0.1:1"};  // nothing listens on port 1
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  auto res = request((*r)->port(), "POST", "/v1/completions", R"({"model":"m"})");
  EXPECT_EQ(res.status, 502);
}

TEST(Router, ListsItsModels) {
  Table t;
  t.endpoints["m1"] = {};
  t.endpoints["m2"] = {};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  auto res = request((*r)->port(), "GET", "/v1/models");
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
  auto metrics = request((*r)->port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ((*parse_json(metrics.body, "b"))["path"], "/metrics");
  auto post = request((*r)->port(), "POST", "/v1/chat/completions", R"({"model":"whatever"})");
  EXPECT_EQ((*parse_json(post.body, "b"))["backend"], "a");
}

TEST(Router, RelaysAStreamAsItArrives) {
  Backend a("a");
  Table t;
  t.endpoints["m"] = {a.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  auto res = request((*r)->port(), "POST", "/stream", R"({"model":"m","stream":true})");
  ASSERT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n");
  EXPECT_EQ(res.header("content-type"), "text/event-stream");
}

TEST(Router, DeliversEachEventBeforeThePodSendsTheNext) {
  Backend a("a");
  Table t;
  t.endpoints["m"] = {a.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  http::ClientRequest req;
  req.method = "POST";
  req.body = R"({"model":"m","stream":true})";
  req.content_type = "application/json";
  auto stream = http::fetch_stream((*r)->url() + "/stream", req);
  ASSERT_TRUE(stream.ok()) << stream.error().to_string();
  // The backend pauses 50 ms between events: a relay that buffered would hand over everything at once;
  // this one hands over the first event alone, and the next one only when the pod sent it.
  auto first = (*stream)->read();
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ(**first, "data: 0\n\n");
  const auto t1 = std::chrono::steady_clock::now();
  auto second = (*stream)->read();
  ASSERT_TRUE(second.ok() && *second);
  EXPECT_EQ(**second, "data: 1\n\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t1, 30ms);
}

TEST(Router, CancelsThePodsRequestWhenTheClientGoesAway) {
  Backend a("a");
  Table t;
  t.endpoints["m"] = {a.address()};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  {
    http::ClientRequest req;
    req.method = "POST";
    req.body = R"({"model":"m","stream":true})";
    req.content_type = "application/json";
    auto stream = http::fetch_stream((*r)->url() + "/endless", req);
    ASSERT_TRUE(stream.ok()) << stream.error().to_string();
    auto first = (*stream)->read();
    ASSERT_TRUE(first.ok() && *first);
  }  // the client hangs up mid-stream
  EXPECT_TRUE(infergate::testing::eventually([&] { return a.saw_disconnect(); }))
      << "the pod kept generating for a client that was gone";
}

TEST(Router, CutsTheClientsResponseWhenThePodBreaksOff) {
  Backend a("a");
  Table t;
  t.endpoints["m"] = {a.address()};
  auto r = Router::for_endpoint("127.0.0.1:0", "m", t.resolver());
  ASSERT_TRUE(r.ok());
  http::ClientRequest req;
  req.timeout = 10s;
  auto got = http::fetch((*r)->url() + "/cut", req);
  ASSERT_FALSE(got.ok()) << "a truncated body must not reach the client as a complete one";
  EXPECT_EQ(got.error().reason(), "ConnectionFailed");
}

TEST(Router, RefusesABodyOverSixteenMiBWithAnOpenAiError) {
  Table t;
  t.endpoints["m"] = {};
  auto r = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(r.ok());
  auto res = request((*r)->port(), "POST", "/v1/completions", std::string(17u << 20, 'x'));
  EXPECT_EQ(res.status, 413);
  auto j = parse_json(res.body, "b");
  ASSERT_TRUE(j.ok()) << res.body;
  EXPECT_EQ((*j)["error"]["type"], "invalid_request_error");
}

TEST(Router, RefusesABindAddressItCannotUse) {
  Table t;
  auto first = Router::front_door("127.0.0.1:0", t.resolver(), t.lister());
  ASSERT_TRUE(first.ok());
  auto second = Router::front_door("127.0.0.1:" + std::to_string((*first)->port()), t.resolver(), t.lister());
  EXPECT_TRUE(refused(second, "BindFailed", {"Address already in use"}));
  EXPECT_TRUE(refused(Router::front_door("nonsense", t.resolver(), t.lister()), "", {"want host:port"}));
}

}  // namespace
}  // namespace infergate::op::local
