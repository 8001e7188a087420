// The HTTP layer on loopback: limits, deadlines, streaming, disconnect notice.
#include "infergate/runtime/server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "infergate/runtime/server/http_client.h"
#include "testing.h"

namespace infergate::runtime::server {
namespace {

using testing::RawConnection;

std::unique_ptr<HttpServer> serve(Handler h, HttpServerOptions o = {}) {
  o.port = 0;
  auto s = HttpServer::start(o, std::move(h));
  EXPECT_TRUE(s.ok());
  return s.ok() ? std::move(s).value() : nullptr;
}

Url url_of(const HttpServer& s) { return Url{"127.0.0.1", s.port(), ""}; }

TEST(HttpServer, AnswersAndKeepsTheConnectionAlive) {
  auto s = serve([](std::shared_ptr<Exchange> ex) {
    ex->respond(
        {200, "text/plain", {}, ex->request().method + " " + ex->request().path + " " + ex->request().body});
  });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("POST /a?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
  EXPECT_NE(c.read_until("POST /a hi", 5000).find("POST /a hi"), std::string::npos);
  ASSERT_TRUE(c.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(c.read_until("GET /b ", 5000).find("HTTP/1.1 200 OK"), std::string::npos);
}

TEST(HttpServer, RefusesABodyOverTheLimitWith413BeforeReadingIt) {
  std::atomic<int> calls{0};
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  auto s = serve(
      [&](std::shared_ptr<Exchange> ex) {
        ++calls;
        ex->respond({200, "text/plain", {}, "x"});
      },
      o);
  RawConnection c(s->port());
  // Only the header is sent: the answer must not wait for the (announced) 10 MB.
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"));
  std::string resp = c.read_until("}}", 5000);
  EXPECT_NE(resp.find("HTTP/1.1 413"), std::string::npos) << resp;
  EXPECT_NE(resp.find("request_too_large"), std::string::npos) << resp;
  EXPECT_EQ(calls.load(), 0);
  // Also with our client sending a whole oversized body.
  ClientRequest r;
  r.method = "POST";
  r.target = "/";
  r.body = std::string(5000, 'x');
  auto got = http_call(url_of(*s), r);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->status, 413);
}

TEST(HttpServer, AnswersMalformedRequestsWith400) {
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("THIS IS NOT HTTP\r\n\r\n"));
  std::string resp = c.read_until("}}", 5000);
  EXPECT_NE(resp.find("HTTP/1.1 400"), std::string::npos) << resp;
  EXPECT_TRUE(c.wait_closed(5000));
}

TEST(HttpServer, ClosesIdleAndSlowClientsAfterTheRequestTimeout) {
  HttpServerOptions o;
  o.request_timeout = std::chrono::milliseconds(300);
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  RawConnection idle(s->port());
  RawConnection slow(s->port());
  ASSERT_TRUE(slow.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Le"));  // and never the rest
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(idle.wait_closed(5000));
  EXPECT_TRUE(slow.wait_closed(5000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

TEST(HttpServer, StreamsChunksAsTheyAreWritten) {
  std::atomic<bool> release{false};
  auto s = serve([&](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "text/event-stream");
    ex->write("data: one\n\n");
    std::thread([ex, &release] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ex->write("data: two\n\n");
      ex->finish();
    }).detach();
  });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
  // The first chunk arrives while the handler still holds the second back.
  std::string first = c.read_until("data: one", 5000);
  EXPECT_NE(first.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(first.find("data: one"), std::string::npos);
  release = true;
  std::string rest = c.read_until("0\r\n\r\n", 5000);
  EXPECT_NE(rest.find("data: two"), std::string::npos);
}

TEST(HttpServer, TellsTheHandlerWhenTheClientDisconnectsMidResponse) {
  std::atomic<bool> gone{false};
  std::shared_ptr<Exchange> held;
  std::mutex mu;
  auto s = serve([&](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "text/event-stream");
    ex->write("data: hello\n\n");
    ex->on_disconnect([&] { gone = true; });
    std::lock_guard<std::mutex> lock(mu);
    held = ex;  // never finished: generation "still running"
  });
  {
    RawConnection c(s->port());
    ASSERT_TRUE(c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_NE(c.read_until("hello", 5000).find("hello"), std::string::npos);
  }  // closed
  for (int i = 0; i < 500 && !gone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone.load());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(held->disconnected());
  held->write("ignored");  // writes after a disconnect are dropped, not a crash
  held->finish();
}

TEST(HttpServer, AnswersExpectContinueBeforeTheBody) {
  auto s = serve([](std::shared_ptr<Exchange> ex) {
    ex->respond({200, "text/plain", {}, ex->request().body});
  });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  EXPECT_NE(c.read_until("100 Continue", 5000).find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(c.send("abc"));
  EXPECT_NE(c.read_until("abc", 5000).find("abc"), std::string::npos);
}

TEST(HttpServer, RefusesConnectionsOverTheCapWith503) {
  HttpServerOptions o;
  o.max_connections = 1;
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  RawConnection first(s->port());
  ASSERT_TRUE(first.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_NE(first.read_until("\r\n\r\n", 5000).find("200"), std::string::npos);
  RawConnection second(s->port());
  std::string resp = second.read_until("}}", 5000);
  EXPECT_NE(resp.find("HTTP/1.1 503"), std::string::npos) << resp;
}

TEST(HttpServer, ParsesUrls) {
  auto u = parse_url("http://10.0.0.1:8080/base/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "/base");
  EXPECT_EQ(parse_url("http://h").value().port, 80);
  EXPECT_FALSE(parse_url("https://h").ok());
  EXPECT_FALSE(parse_url("http://h:99999").ok());
  EXPECT_FALSE(parse_url("http://:80").ok());
}

}  // namespace
}  // namespace infergate::runtime::server
