// The runtime's HTTP/1.1 server: Boost.Beast's request parser over Asio sockets, with what an
// inference server needs and cpprestsdk's listener does not give: the body limit enforced from the
// Content-Length before the body is read (413), a deadline for a whole request (idle keep-alive and
// slow "slowloris" clients are closed), a write deadline (a client that stops reading a stream is
// dropped), and disconnect notification while a response is pending, so that generation for a client
// that went away is cancelled at once.
//
// Thread-safety: an Exchange may be used from any thread; its calls are serialised on the
// connection's strand. Handlers run on an I/O thread and must not block: they hand work to the
// scheduler and answer later through the Exchange.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::runtime::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path plus query
  std::string path;    // target without the query
  Headers headers;     // names lower-cased, in arrival order
  std::string body;

  // The first value of a header (name compared case-insensitively), or empty.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;  // extra headers (Retry-After, ...)
  std::string body;
};

// One request and its response. Either respond() once, or start_stream() then write()* and finish().
// Calls after the response is complete, or after the client disconnected, are ignored.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const HttpRequest& request() const = 0;
  virtual void respond(HttpResponse response) = 0;
  // A chunked response (server-sent events use content type "text/event-stream").
  virtual void start_stream(int status, std::string content_type, Headers headers = {}) = 0;
  // Queues one chunk; it is flushed to the socket at once (no buffering until the end).
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // `callback` runs once, on an I/O thread, if the client disconnects (or a write deadline passes)
  // before the response is complete; at once if that has already happened.
  virtual void on_disconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
  // Bytes queued on the socket but not yet written (back-pressure from a slow reader).
  virtual size_t pending_bytes() const = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 2;
  uint64_t max_body_bytes = 8u << 20;  // larger bodies: 413 before the body is read
  uint32_t max_header_bytes = 16u << 10;
  // A connection must deliver a whole request within this long of being accepted or of its previous
  // response (idle keep-alive connections and slow senders are closed).
  std::chrono::milliseconds request_timeout{30'000};
  // A queued write that makes no progress for this long drops the connection (the client stopped reading).
  std::chrono::milliseconds write_timeout{30'000};
  int max_connections = 1024;  // more are answered 503 and closed
  // Renders the body of an error the server itself produces (malformed HTTP, 413, 431, 503), so the
  // HTTP layer stays API-neutral: (status, message, code) -> JSON body.
  std::function<std::string(int, std::string_view, std::string_view)> error_body;
};

class HttpServer {
 public:
  // Binds and starts serving on io_threads threads. Errors name the address (reason "BindFailed").
  static Result<std::unique_ptr<HttpServer>> start(HttpServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& host() const;
  int port() const;
  // Open connections right now.
  int connections() const;
  // Requests handed to the handler whose response is not yet completely written (or abandoned).
  int busy() const;
  // Waits until busy() is 0 or the deadline passes; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
  // Closes the listener and every connection and joins the I/O threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "HTTP reason phrase" for a status code ("Too Many Requests").
std::string_view http_status_text(int status);

}  // namespace infergate::runtime::server
