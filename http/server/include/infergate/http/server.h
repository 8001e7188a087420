// The project's one HTTP/1.1 server: Boost.Beast's request parser over Asio sockets, plain or TLS
// (OpenSSL, with optional or required client certificates). It serves the runtime's OpenAI API, the
// operator's probes and metrics, the local router and the test fixtures (fake API server, stand-in
// engines), and gives them what a generic listener does not:
//  - the body limit enforced from the Content-Length before the body is read (413);
//  - a deadline for a whole request (idle keep-alive and slow "slowloris" clients are closed, the TLS
//    handshake included) and a write deadline (a client that stops reading a stream is dropped);
//  - disconnect notification while a response is pending (generation for a client that went away is
//    cancelled at once);
//  - chunked streams, sized streams (a known Content-Length written in pieces) and abort(), which cuts
//    the connection mid-response (fault injection: a watch stream that breaks);
//  - handlers that must block (an authorisation call, a relay, a fixture's watch loop) run on a
//    bounded pool of their own (BlockingHandlers), never on an I/O thread.
//
// Thread-safety: an Exchange may be used from any thread; its calls are serialised on the
// connection's strand. Handlers given to Server::start run on an I/O thread and must not block: they
// answer at once, or hand the Exchange to other work and answer later through it. Every Exchange must be
// released before its Server is destroyed (stop() first, then let go of them).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path plus query
  std::string path;    // target without the query (not percent-decoded)
  Headers headers;     // names lower-cased, in arrival order
  std::string body;
  // Over TLS with a client certificate that verified: its subject's common name (else empty).
  std::string peer_common_name;

  // The first value of a header (name compared case-insensitively), or empty.
  std::string header(std::string_view name) const;
  // The token of "Authorization: Bearer <token>", or empty.
  std::string bearer_token() const;
  // The query's parameters, percent-decoded ("+" is a space); the last value of a repeated key wins.
  std::map<std::string, std::string> query() const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;  // extra headers (Retry-After, ...)
  std::string body;
};

// One request and its response. Either respond() once, or start_stream() (chunked) or start_sized()
// (a Content-Length written in pieces), then write()* and finish(). Calls after the response is
// complete, after abort(), or after the client disconnected, are ignored.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;
  virtual void respond(Response response) = 0;
  // A chunked response (server-sent events use content type "text/event-stream").
  virtual void start_stream(int status, std::string content_type, Headers headers = {}) = 0;
  // A response of exactly `content_length` bytes, written by write() in pieces. finish() before that
  // many bytes were written closes the connection (the client sees a truncated body, not a short one).
  virtual void start_sized(int status, std::string content_type, uint64_t content_length,
                           Headers headers = {}) = 0;
  // Queues one piece; it is flushed to the socket at once (no buffering until the end).
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // Closes the connection now, whatever was queued or promised: the client sees the connection cut.
  virtual void abort() = 0;
  // `callback` runs once, on an I/O thread, if the client disconnects (or a write deadline passes)
  // before the response is complete; at once if that has already happened.
  virtual void on_disconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
  // Bytes queued on the socket but not yet written (back-pressure from a slow reader).
  virtual size_t pending_bytes() const = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

// Serving over TLS. PEM text; the chain starts with the server's own certificate.
struct TlsOptions {
  std::string cert_chain_pem;
  std::string key_pem;
  // Client certificates signed by this CA are verified (and their common name reported in
  // Request::peer_common_name). Empty: none are asked for.
  std::string client_ca_pem;
  // With client_ca_pem: refuse a client that presents none (else it may connect without one).
  bool require_client_cert = false;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 2;
  uint64_t max_body_bytes = 8u << 20;  // larger bodies: 413 before the body is read
  uint32_t max_header_bytes = 16u << 10;
  // A connection must deliver a whole request within this long of being accepted (TLS handshake
  // included) or of its previous response (idle keep-alive connections and slow senders are closed).
  std::chrono::milliseconds request_timeout{30'000};
  // A queued write that makes no progress for this long drops the connection (the client stopped reading).
  std::chrono::milliseconds write_timeout{30'000};
  int max_connections = 1024;  // more are answered 503 and closed
  // Renders the body of an error the server itself produces (malformed HTTP, 413, 431, 503), so the
  // HTTP layer stays API-neutral: (status, message, code) -> JSON body.
  std::function<std::string(int, std::string_view, std::string_view)> error_body;
  std::optional<TlsOptions> tls;
  // The Server response header.
  std::string server_name = "infergate";
};

class Server {
 public:
  // Binds and starts serving on io_threads threads. Errors name the address (reason "BindFailed") or
  // the TLS material that cannot be used (reason "BadTlsConfig").
  static Result<std::unique_ptr<Server>> start(ServerOptions options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& host() const;
  int port() const;
  bool tls() const;
  // "http://host:port" or "https://host:port" (a wildcard host reads as 127.0.0.1).
  std::string url() const;
  // Open connections right now.
  int connections() const;
  // Requests handed to the handler whose response is not yet completely written (or abandoned).
  int busy() const;
  // Waits until busy() is 0 or the deadline passes; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
  // New TLS material for connections accepted from now on (a rotated serving certificate); the
  // connections already open keep theirs. FailedPrecondition on a plain-HTTP server.
  Status reload_tls(const TlsOptions& tls);
  // Closes the listener and every connection and joins the I/O threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs handlers that block (they call other services, wait for events, sleep) on threads of their own:
// a pool that grows on demand up to `max_threads` and answers 503 (with Retry-After) when all of them are
// busy, rather than queueing behind long-running requests such as watch streams.
// Lifetime: stop() (or the destructor) waits for the running handlers; call it after Server::stop(), so
// that handlers waiting on a client see it gone, and before the Server is destroyed.
class BlockingHandlers {
 public:
  explicit BlockingHandlers(size_t max_threads);
  ~BlockingHandlers();
  BlockingHandlers(const BlockingHandlers&) = delete;
  BlockingHandlers& operator=(const BlockingHandlers&) = delete;

  // A Handler for Server::start that runs `blocking` on one of the pool's threads.
  Handler wrap(Handler blocking);
  void stop();

 private:
  void run_worker();
  size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

// "Too Many Requests" for 429 and the other reason phrases.
std::string_view status_text(int status);
// %XX escapes decoded; with `plus_is_space`, "+" too (query strings).
std::string percent_decode(std::string_view s, bool plus_is_space = false);

}  // namespace infergate::http
