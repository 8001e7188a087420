// The HTTP server on loopback: limits, deadlines, streaming, disconnect notice, abort, TLS with client
// certificates, and the pool for blocking handlers. Connection-level faults use raw sockets; everything
// else talks through the project's client.
#include "infergate/http/server.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/eventually.h"
#include "fixtures/tls_certs.h"
#include "http/raw_connection.h"
#include "infergate/http/client.h"

namespace infergate::http {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;
using testing::RawConnection;

std::unique_ptr<Server> serve(Handler h, ServerOptions o = {}) {
  o.port = 0;
  auto s = Server::start(o, std::move(h));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(Server, AnswersAndKeepsTheConnectionAlive) {
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

TEST(Server, RefusesABodyOverTheLimitWith413BeforeReadingIt) {
  std::atomic<int> calls{0};
  ServerOptions o;
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
  r.body = std::string(5000, 'x');
  r.content_type = "text/plain";
  auto got = fetch(s->url() + "/", r);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->status, 413);
}

TEST(Server, AnswersMalformedRequestsWith400) {
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("THIS IS NOT HTTP\r\n\r\n"));
  std::string resp = c.read_until("}}", 5000);
  EXPECT_NE(resp.find("HTTP/1.1 400"), std::string::npos) << resp;
  EXPECT_TRUE(c.wait_closed(5000));
}

TEST(Server, ClosesIdleAndSlowClientsAfterTheRequestTimeout) {
  ServerOptions o;
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

TEST(Server, StreamsChunksAsTheyAreWritten) {
  std::mutex mu;
  std::shared_ptr<Exchange> held;
  auto s = serve([&](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "text/event-stream");
    ex->write("data: one\n\n");
    std::lock_guard lock(mu);
    held = ex;  // the second chunk comes when the test says so
  });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
  // The first chunk arrives while the handler still holds the second back.
  std::string first = c.read_until("data: one", 5000);
  EXPECT_NE(first.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(first.find("data: one"), std::string::npos);
  ASSERT_TRUE(infergate::testing::eventually([&] {
    std::lock_guard lock(mu);
    return held != nullptr;
  }));
  {
    std::lock_guard lock(mu);
    held->write("data: two\n\n");
    held->finish();
  }
  std::string rest = c.read_until("0\r\n\r\n", 5000);
  EXPECT_NE(rest.find("data: two"), std::string::npos);
  s->stop();
  held.reset();
}

TEST(Server, TellsTheHandlerWhenTheClientDisconnectsMidResponse) {
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
  EXPECT_TRUE(infergate::testing::eventually([&] { return gone.load(); }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(held->disconnected());
  held->write("ignored");  // writes after a disconnect are dropped, not a crash
  held->finish();
  s->stop();
  held.reset();  // every exchange is let go before its server is destroyed
}

TEST(Server, AnswersExpectContinueBeforeTheBody) {
  auto s = serve([](std::shared_ptr<Exchange> ex) {
    ex->respond({200, "text/plain", {}, ex->request().body});
  });
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  EXPECT_NE(c.read_until("100 Continue", 5000).find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(c.send("abc"));
  EXPECT_NE(c.read_until("abc", 5000).find("abc"), std::string::npos);
}

TEST(Server, RefusesConnectionsOverTheCapWith503) {
  ServerOptions o;
  o.max_connections = 1;
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  RawConnection first(s->port());
  ASSERT_TRUE(first.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_NE(first.read_until("\r\n\r\n", 5000).find("200"), std::string::npos);
  RawConnection second(s->port());
  std::string resp = second.read_until("}}", 5000);
  EXPECT_NE(resp.find("HTTP/1.1 503"), std::string::npos) << resp;
}

TEST(Server, SendsASizedBodyInPiecesAndCutsOneThatEndsShort) {
  auto s = serve([](std::shared_ptr<Exchange> ex) {
    const bool whole = ex->request().path == "/whole";
    ex->start_sized(200, "text/plain", 10);
    ex->write("hello");
    if (whole) ex->write("world, and more than promised");  // cut to the announced length
    ex->finish();
  });
  auto whole = fetch(s->url() + "/whole");
  ASSERT_TRUE(whole.ok()) << whole.error().to_string();
  EXPECT_EQ(whole->body, "helloworld");
  EXPECT_EQ(whole->header("content-length"), "10");
  auto cut = fetch(s->url() + "/short");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().reason(), "ConnectionFailed") << cut.error().to_string();
}

TEST(Server, AbortCutsAStreamMidResponse) {
  std::mutex mu;
  std::shared_ptr<Exchange> held;
  auto s = serve([&](std::shared_ptr<Exchange> ex) {
    ex->start_stream(200, "application/json");
    ex->write("{\"type\":\"ADDED\"}\n");
    std::lock_guard lock(mu);
    held = ex;  // a watch that stays open until the test cuts it
  });
  auto stream = fetch_stream(s->url() + "/watch");
  ASSERT_TRUE(stream.ok()) << stream.error().to_string();
  auto first = (*stream)->read();
  ASSERT_TRUE(first.ok() && *first) << (first.ok() ? "end" : first.error().to_string());
  EXPECT_EQ(**first, "{\"type\":\"ADDED\"}\n");
  ASSERT_TRUE(infergate::testing::eventually([&] {
    std::lock_guard lock(mu);
    return held != nullptr;
  }));
  {
    std::lock_guard lock(mu);
    held->abort();
  }
  auto next = (*stream)->read();
  ASSERT_FALSE(next.ok()) << "a cut stream must not read as a clean end";
  EXPECT_EQ(next.error().reason(), "ConnectionFailed");
  s->stop();
  held.reset();  // every exchange is let go before its server is destroyed
}

TEST(Server, AnswersA500WhenAHandlerDropsTheRequestUnanswered) {
  auto s = serve([](std::shared_ptr<Exchange>) {});
  auto r = fetch(s->url() + "/");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("no_response"), std::string::npos) << r->body;
}

TEST(Server, ReadsHeadersQueryAndBearerToken) {
  std::mutex mu;
  Request seen;
  auto s = serve([&](std::shared_ptr<Exchange> ex) {
    std::lock_guard lock(mu);
    seen = ex->request();
    ex->respond({});
  });
  ClientRequest r;
  r.headers = {{"Authorization", "Bearer abc.def"}, {"X-Thing", "1"}};
  ASSERT_TRUE(fetch(s->url() + "/p%2Fq?labelSelector=a%3Db%2Cc&watch=1&x=1&x=2&sp=a+b", r).ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(seen.path, "/p%2Fq");
  EXPECT_EQ(percent_decode(seen.path), "/p/q");
  EXPECT_EQ(seen.bearer_token(), "abc.def");
  EXPECT_EQ(seen.header("x-thing"), "1");
  auto q = seen.query();
  EXPECT_EQ(q["labelSelector"], "a=b,c");
  EXPECT_EQ(q["watch"], "1");
  EXPECT_EQ(q["x"], "2");
  EXPECT_EQ(q["sp"], "a b");
}

TEST(Server, ServesTlsAndReportsAVerifiedClientCertificate) {
  auto tls = infergate::testing::make_tls_material("scraper");
  ASSERT_TRUE(tls.ok()) << tls.error().to_string();
  ServerOptions o;
  o.tls = TlsOptions{tls->server_cert_pem, tls->server_key_pem, tls->ca_pem, false};
  auto s = serve(
      [](std::shared_ptr<Exchange> ex) {
        ex->respond({200, "text/plain", {}, "cn=" + ex->request().peer_common_name});
      },
      o);
  ASSERT_EQ(s->url().rfind("https://127.0.0.1:", 0), 0u);
  ClientTls with_cert{tls->ca_pem, tls->client_cert_pem, tls->client_key_pem, false};
  auto r = fetch(s->url() + "/", {}, with_cert);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->body, "cn=scraper");
  auto anonymous = fetch(s->url() + "/", {}, ClientTls{tls->ca_pem, "", "", false});
  ASSERT_TRUE(anonymous.ok()) << anonymous.error().to_string();
  EXPECT_EQ(anonymous->body, "cn=");  // optional: no certificate, no name
  // A client that does not trust the server's CA refuses it.
  auto other = infergate::testing::make_tls_material();
  ASSERT_TRUE(other.ok());
  ClientRequest quick;
  quick.timeout = 5s;
  auto untrusted = fetch(s->url() + "/", quick, ClientTls{other->ca_pem, "", "", false});
  EXPECT_TRUE(refused(untrusted, "ConnectionFailed", {"SSL handshake"}));
}

TEST(Server, RequiresAClientCertificateWhenAskedTo) {
  auto tls = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok());
  ServerOptions o;
  o.tls = TlsOptions{tls->server_cert_pem, tls->server_key_pem, tls->ca_pem, true};
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  ClientRequest quick;
  quick.timeout = 5s;
  EXPECT_FALSE(fetch(s->url() + "/", quick, ClientTls{tls->ca_pem, "", "", false}).ok());
  auto ok =
      fetch(s->url() + "/", quick, ClientTls{tls->ca_pem, tls->client_cert_pem, tls->client_key_pem, false});
  EXPECT_TRUE(ok.ok()) << ok.error().to_string();
}

TEST(Server, RefusesTlsMaterialItCannotUseAtStart) {
  auto tls = infergate::testing::make_tls_material();
  auto other = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok() && other.ok());
  ServerOptions o;
  o.tls = TlsOptions{tls->server_cert_pem, other->server_key_pem, "", false};  // a key of another cert
  auto mismatched = Server::start(o, [](std::shared_ptr<Exchange> ex) { ex->respond({}); });
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.error().reason(), "BadTlsConfig");
  EXPECT_NE(mismatched.error().message().find("does not belong"), std::string::npos);
  o.tls = TlsOptions{"not pem", tls->server_key_pem, "", false};
  EXPECT_EQ(Server::start(o, [](std::shared_ptr<Exchange>) {}).error().reason(), "BadTlsConfig");
}

TEST(Server, NewConnectionsGetReloadedTlsMaterial) {
  auto first = infergate::testing::make_tls_material();
  auto second = infergate::testing::make_tls_material();
  ASSERT_TRUE(first.ok() && second.ok());
  ServerOptions o;
  o.tls = TlsOptions{first->server_cert_pem, first->server_key_pem, "", false};
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  ClientRequest quick;
  quick.timeout = 5s;
  EXPECT_TRUE(fetch(s->url() + "/", quick, ClientTls{first->ca_pem, "", "", false}).ok());
  ASSERT_TRUE(s->reload_tls(TlsOptions{second->server_cert_pem, second->server_key_pem, "", false}).ok());
  EXPECT_TRUE(refused(fetch(s->url() + "/", quick, ClientTls{first->ca_pem, "", "", false}),
                      "ConnectionFailed", {"SSL handshake"}));
  EXPECT_TRUE(fetch(s->url() + "/", quick, ClientTls{second->ca_pem, "", "", false}).ok());
  EXPECT_TRUE(
      refused(s->reload_tls(TlsOptions{"x", "y", "", false}), "BadTlsConfig", {"not a PEM certificate"}));
}

TEST(Server, ClosesATlsClientThatNeverFinishesItsHandshake) {
  auto tls = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok());
  ServerOptions o;
  o.tls = TlsOptions{tls->server_cert_pem, tls->server_key_pem, "", false};
  o.request_timeout = 300ms;
  auto s = serve([](std::shared_ptr<Exchange> ex) { ex->respond({}); }, o);
  RawConnection c(s->port());
  ASSERT_TRUE(c.send("\x16\x03\x01"));  // the start of a ClientHello, and nothing more
  EXPECT_TRUE(c.wait_closed(5000));
}

TEST(BlockingHandlers, RunHandlersThatBlockAndRefuseWhenEveryThreadIsBusy) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> running{0};
  BlockingHandlers pool(2);
  auto s = serve(pool.wrap([&](std::shared_ptr<Exchange> ex) {
    ++running;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
    ex->respond({200, "text/plain", {}, "done"});
  }));
  std::vector<std::thread> clients;
  std::atomic<int> done{0};
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&] {
      auto r = fetch(s->url() + "/");
      if (r.ok() && r->body == "done") ++done;
    });
  }
  ASSERT_TRUE(infergate::testing::eventually([&] { return running.load() == 2; }));
  auto busy = fetch(s->url() + "/");  // a third while both threads block: refused, not queued
  ASSERT_TRUE(busy.ok()) << busy.error().to_string();
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->header("retry-after"), "1");
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : clients) t.join();
  EXPECT_EQ(done.load(), 2);
  s->stop();
  pool.stop();
}

}  // namespace
}  // namespace infergate::http
