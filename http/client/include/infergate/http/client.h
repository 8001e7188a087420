// The project's one HTTP client: a small facade over cpprestsdk's http_client (the transport the
// Kubernetes client is built on), used for the API server, serving pods' /metrics, Prometheus, the
// local router's relay, the runtime's traffic replay and eval targets, and the tests. cpprestsdk stays
// inside this library's sources; callers see Result, strings and Headers only.
//
// Guarantees:
//  - every call has a deadline (ClientRequest::timeout, else ClientOptions::timeout) for the whole
//    exchange, body included, however slowly the server trickles it; a stream's deadline covers it
//    until its end;
//  - no exception escapes: transport errors come back as Error with a reason word:
//      BadUrl (InvalidArgument), BadTlsConfig (InvalidArgument), Timeout (DeadlineExceeded),
//      Cancelled (Cancelled), ConnectionFailed (Unavailable: refused, reset, DNS, TLS handshake, a
//      stream cut mid-body), BodyTooLarge (ResourceExhausted);
//  - any HTTP status is a response, not an error (callers decide what 4xx/5xx mean); redirects are
//    not followed; nothing is retried here;
//  - a response body can be read as it arrives (open(): server-sent events, watch streams, a relay).
// Thread-safe: one Client may serve concurrent calls; a ResponseStream is read by one thread at a
// time, and cancel() may come from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct ClientTls {
  std::string ca_pem;           // trusted CAs for the server's certificate (else the system's)
  std::string client_cert_pem;  // a client certificate (chain) and its key, when the server asks for one
  std::string client_key_pem;
  bool insecure_skip_verify = false;  // only when asked for, never by default
};

struct ClientOptions {
  // "http://host[:port][/prefix]" or "https://...": request targets are appended to the prefix.
  std::string base_url;
  std::chrono::milliseconds timeout{30'000};  // the deadline of a call whose request names none
  ClientTls tls;
  std::string user_agent = "infergate";
};

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query, already encoded
  Headers headers;
  std::string body;
  std::string content_type;              // sent with a body (or for a POST/PUT/PATCH without one)
  std::chrono::milliseconds timeout{0};  // 0: the client's
  uint64_t max_body = 64u << 20;         // call(): a longer body is BodyTooLarge
};

struct ClientResponse {
  int status = 0;
  Headers headers;  // names lower-cased
  std::string body;
  // The first value of a header (case-insensitive), or empty.
  std::string header(std::string_view name) const;
};

// A response whose body is read as it arrives.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual int status() const = 0;
  virtual const Headers& headers() const = 0;  // names lower-cased
  std::string header(std::string_view name) const;
  // The body's content length when the server announced one.
  virtual std::optional<uint64_t> content_length() const = 0;
  // The next bytes of the body as soon as any arrive (at most `max_bytes`); an empty optional at the
  // body's clean end. Errors: Timeout (the request's deadline passed), Cancelled, ConnectionFailed (the
  // connection broke before the end).
  virtual Result<std::optional<std::string>> read(size_t max_bytes = 64u << 10) = 0;
  // Reads the rest of the body (at most `max_body` bytes, else BodyTooLarge).
  Result<std::string> read_all(uint64_t max_body = 64u << 20);
  // Stops the exchange: a read() blocked now or later returns Cancelled. Any thread; idempotent.
  virtual void cancel() = 0;
};

class Client {
 public:
  // Errors: BadUrl (not http(s)://, no host), BadTlsConfig (PEM material that does not parse).
  static Result<std::unique_ptr<Client>> create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends the request and reads the whole response.
  Result<ClientResponse> call(const ClientRequest& request);
  // Sends the request and returns once the status and headers are in; the body is read from the stream.
  Result<std::unique_ptr<ResponseStream>> open(const ClientRequest& request);

  const ClientOptions& options() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One request to an absolute URL ("http://10.1.2.3:8000/metrics?x=1"), with a client made for it.
Result<ClientResponse> fetch(std::string_view url, ClientRequest request = {}, ClientTls tls = {});
// The same, opened as a stream.
Result<std::unique_ptr<ResponseStream>> fetch_stream(std::string_view url, ClientRequest request = {},
                                                     ClientTls tls = {});

// Splits an absolute URL into its origin plus prefix ("http://h:1/p") and its path and query ("/q?x=1"),
// for a Client made once and asked many times. BadUrl for anything not http(s) with a host.
Result<std::pair<std::string, std::string>> split_url(std::string_view url);

// Sizes the transport's shared thread pool (cpprestsdk's default is 40 threads, whose hand-offs cost more
// than they bring to a controller). Call once, before the first client is created, from the program's
// main path; FailedPrecondition if the pool already runs.
Status configure_client_threads(size_t threads);

// Splits a server-sent-event stream into events as bytes arrive: feed() any pieces, get each event's
// data (lines after "data: " joined by "\n") as soon as its blank line is seen.
class SseParser {
 public:
  explicit SseParser(std::function<void(std::string_view data)> on_event) : on_event_(std::move(on_event)) {}
  void feed(std::string_view bytes);

 private:
  std::function<void(std::string_view)> on_event_;
  std::string buf_;
  std::string data_;
};

}  // namespace infergate::http
