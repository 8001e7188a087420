// A small blocking HTTP/1.1 client (Boost.Beast) for the traffic-replay tool and the tests: one request
// per connection, the response body delivered as it arrives (chunked server-sent events included), with
// a deadline for the whole exchange. Errors carry the reason "HttpClient" and name the URL.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "infergate/common/result.h"
#include "infergate/runtime/server/http_server.h"

namespace infergate::runtime::server {

struct Url {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash)
};
// Parses "http://host:port[/prefix]"; https is refused (the runtime speaks plain HTTP on the pod network).
Result<Url> parse_url(std::string_view url);

struct ClientResponse {
  int status = 0;
  Headers headers;  // names lower-cased
  std::string body;
  std::string header(std::string_view name) const;
};

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  std::string body;
  std::string content_type = "application/json";
  Headers headers;
  std::chrono::milliseconds timeout{60'000};
  // When set, each piece of the body is handed over as it arrives (and not kept in body).
  std::function<void(std::string_view)> on_data;
  // When set, called with the status and headers before any body bytes.
  std::function<void(int status, const Headers& headers)> on_head;
};

Result<ClientResponse> http_call(const Url& url, const ClientRequest& request);

// Splits a server-sent-event stream into events as bytes arrive: feed() any pieces, get each
// event's data (lines after "data: " joined by "\n") as soon as its blank line is seen.
class SseParser {
 public:
  explicit SseParser(std::function<void(std::string_view data)> on_event) : on_event_(std::move(on_event)) {}
  void feed(std::string_view bytes);

 private:
  std::function<void(std::string_view)> on_event_;
  std::string buf_;
  std::string data_;
};

}  // namespace infergate::runtime::server
