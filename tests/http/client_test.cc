// The client facade against the project's server on loopback: deadlines that hold however slowly a
// body trickles, cancellation, bodies read as they arrive, caps, and errors with reason words.
#include "infergate/http/client.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <atomic>
#include <thread>

#include "infergate/http/server.h"

namespace infergate::http {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;

// Serves every request on a thread of its own, so that a handler may sleep.
struct TestServer {
  explicit TestServer(Handler blocking) : pool(16) {
    auto s = Server::start({}, pool.wrap(std::move(blocking)));
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
  }
  ~TestServer() {
    server->stop();
    pool.stop();
  }
  std::string url() const { return server->url(); }
  BlockingHandlers pool;
  std::unique_ptr<Server> server;
};

TEST(Client, GetsAResponseOfAnyStatusWithItsHeaders) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    ex->respond(
        {404, "application/json", {{"X-Reason", "none"}}, "{\"missing\":\"" + ex->request().path + "\"}"});
  });
  auto c = Client::create({s.url() + "/prefix", 5s, {}, "test-agent"});
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  ClientRequest r;
  r.target = "/thing?x=1";
  auto got = (*c)->call(r);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->status, 404);
  EXPECT_EQ(got->body, "{\"missing\":\"/prefix/thing\"}");
  EXPECT_EQ(got->header("X-REASON"), "none");
  EXPECT_EQ(got->header("content-type"), "application/json");
}

TEST(Client, SendsTheBodyContentTypeAndUserAgent) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    const Request& q = ex->request();
    ex->respond({200,
                 "text/plain",
                 {},
                 q.method + "|" + q.header("content-type") + "|" + q.header("user-agent") + "|" + q.body});
  });
  auto c = Client::create({s.url(), 5s, {}, "infergate-test/1"});
  ASSERT_TRUE(c.ok());
  ClientRequest r;
  r.method = "PATCH";
  r.target = "/x";
  r.body = "{\"a\":1}";
  r.content_type = "application/merge-patch+json";
  auto got = (*c)->call(r);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->body, "PATCH|application/merge-patch+json|infergate-test/1|{\"a\":1}");
}

TEST(Client, TheDeadlineHoldsForABodyThatTrickles) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    ex->start_sized(200, "text/plain", 1000);
    for (int i = 0; i < 1000 && !ex->disconnected(); ++i) {
      ex->write("x");  // one byte every 20 ms: never idle long enough for an inactivity limit
      std::this_thread::sleep_for(20ms);
    }
    ex->finish();
  });
  ClientRequest r;
  r.timeout = 400ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto got = fetch(s.url() + "/slow", r);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kDeadlineExceeded) << got.error().to_string();
  EXPECT_EQ(got.error().reason(), "Timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST(Client, TimesOutWhenNoAnswerComes) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    for (int i = 0; i < 300 && !ex->disconnected(); ++i) std::this_thread::sleep_for(10ms);
    ex->respond({});
  });
  ClientRequest r;
  r.timeout = 200ms;
  auto got = fetch(s.url() + "/", r);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().reason(), "Timeout") << got.error().to_string();
}

TEST(Client, ReadsAStreamAsItArrivesAndCancelsABlockedRead) {
  std::atomic<bool> release{false};
  TestServer s([&](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "text/event-stream");
    ex->write("data: one\n\n");
    while (!release && !ex->disconnected()) std::this_thread::sleep_for(5ms);
    ex->write("data: two\n\n");
    ex->finish();
  });
  ClientRequest r;
  r.timeout = 60s;
  auto stream = fetch_stream(s.url() + "/events", r);
  ASSERT_TRUE(stream.ok()) << stream.error().to_string();
  EXPECT_EQ((*stream)->status(), 200);
  EXPECT_EQ((*stream)->header("content-type"), "text/event-stream");
  std::vector<std::string> events;
  SseParser sse([&](std::string_view d) { events.emplace_back(d); });
  while (events.empty()) {
    auto piece = (*stream)->read();
    ASSERT_TRUE(piece.ok() && *piece);
    sse.feed(**piece);
  }
  EXPECT_EQ(events, std::vector<std::string>{"one"});  // while the server still holds "two" back
  std::thread canceller([&] {
    std::this_thread::sleep_for(50ms);
    (*stream)->cancel();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto blocked = (*stream)->read();
  canceller.join();
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.error().code(), ErrorCode::kCancelled) << blocked.error().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  release = true;
}

TEST(Client, ReadsAStreamToItsCleanEnd) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "application/json");
    for (int i = 0; i < 3; ++i) ex->write("{\"n\":" + std::to_string(i) + "}\n");
    ex->finish();
  });
  auto stream = fetch_stream(s.url() + "/");
  ASSERT_TRUE(stream.ok());
  auto all = (*stream)->read_all();
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  EXPECT_EQ(*all, "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n");
  auto after = (*stream)->read();
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
}

TEST(Client, RefusesABodyOverTheCap) {
  TestServer s([](std::shared_ptr<Exchange> ex) {
    if (ex->request().path == "/sized") {
      ex->respond({200, "text/plain", {}, std::string(5000, 'a')});
      return;
    }
    ex->start_stream(200, "text/plain");
    for (int i = 0; i < 10; ++i) ex->write(std::string(1000, 'b'));
    ex->finish();
  });
  ClientRequest r;
  r.max_body = 4096;
  auto sized = fetch(s.url() + "/sized", r);
  ASSERT_FALSE(sized.ok());
  EXPECT_EQ(sized.error().reason(), "BodyTooLarge");
  auto chunked = fetch(s.url() + "/chunked", r);
  ASSERT_FALSE(chunked.ok());
  EXPECT_EQ(chunked.error().reason(), "BodyTooLarge");
  EXPECT_EQ(chunked.error().code(), ErrorCode::kResourceExhausted);
}

TEST(Client, SaysConnectionFailedWhenNothingListens) {
  ClientRequest r;
  r.timeout = 5s;
  auto got = fetch("http://127.0.0.1:1/x", r);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().reason(), "ConnectionFailed") << got.error().to_string();
  EXPECT_EQ(got.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(got.error().message().find("127.0.0.1:1"), std::string::npos);
}

TEST(Client, RefusesBadUrlsAndTlsMaterialUpFront) {
  EXPECT_EQ(Client::create({"ftp://x", 1s, {}, ""}).error().reason(), "BadUrl");
  EXPECT_EQ(Client::create({"http://", 1s, {}, ""}).error().reason(), "BadUrl");
  EXPECT_EQ(fetch("localhost:80/x").error().reason(), "BadUrl");
  ClientOptions o;
  o.base_url = "https://127.0.0.1:1";
  o.tls.ca_pem = "not a certificate";
  auto bad = Client::create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().reason(), "BadTlsConfig");
  EXPECT_NE(bad.error().message().find("certificate authority"), std::string::npos);
}

TEST(Client, SplitsUrlsIntoOriginAndTarget) {
  auto a = split_url("http://10.0.0.1:8080/base/x?y=1#frag");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "http://10.0.0.1:8080");
  EXPECT_EQ(a->second, "/base/x?y=1");
  EXPECT_EQ(split_url("https://h").value().second, "/");
  EXPECT_EQ(split_url("http://h?q").value().second, "/?q");
  EXPECT_TRUE(refused(split_url("http://h/a b"), "BadUrl", {"white space"}));
}

TEST(SseParser, JoinsDataLinesAndSplitsEventsAcrossPieces) {
  std::vector<std::string> out;
  SseParser p([&](std::string_view d) { out.emplace_back(d); });
  p.feed("data: a\r\nda");
  p.feed("ta: b\n\n: comment\n\ndata:c\n");
  EXPECT_EQ(out, std::vector<std::string>{"a\nb"});
  p.feed("\n");
  EXPECT_EQ(out, (std::vector<std::string>{"a\nb", "c"}));
}

}  // namespace
}  // namespace infergate::http
