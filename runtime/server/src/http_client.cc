// The blocking HTTP client, over Boost.Beast with a deadline on every operation.
#include "infergate/runtime/server/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace infergate::runtime::server {
namespace {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

Error client_error(const Url& url, std::string_view what, const boost::system::error_code& ec) {
  return Error(
      ErrorCode::kUnavailable,
      std::string(what) + " http://" + url.host + ":" + std::to_string(url.port) + ": " + ec.message(),
      "HttpClient");
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Error(ErrorCode::kInvalidArgument, "URL '" + std::string(url) + "' must start with http://",
                 "BadUrl");
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  Url u;
  if (slash != std::string_view::npos) {
    u.base_path = std::string(rest.substr(slash));
    while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  }
  size_t colon = hostport.rfind(':');
  if (colon == std::string_view::npos ||
      (hostport.find(']') != std::string_view::npos && colon < hostport.find(']'))) {
    u.host = std::string(hostport);
  } else {
    u.host = std::string(hostport.substr(0, colon));
    std::string_view p = hostport.substr(colon + 1);
    int port = 0;
    for (char c : p) {
      if (c < '0' || c > '9' || port > 65535) {
        return Error(ErrorCode::kInvalidArgument, "URL '" + std::string(url) + "' has a bad port", "BadUrl");
      }
      port = port * 10 + (c - '0');
    }
    if (p.empty() || port < 1 || port > 65535) {
      return Error(ErrorCode::kInvalidArgument, "URL '" + std::string(url) + "' has a bad port", "BadUrl");
    }
    u.port = port;
  }
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']')
    u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty())
    return Error(ErrorCode::kInvalidArgument, "URL '" + std::string(url) + "' has no host", "BadUrl");
  return u;
}

std::string ClientResponse::header(std::string_view name) const {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [k, v] : headers) {
    if (k == n) return v;
  }
  return {};
}

Result<ClientResponse> http_call(const Url& url, const ClientRequest& request) {
  net::io_context io;
  beast::tcp_stream stream(io);
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) return client_error(url, "cannot resolve", ec);
  const auto deadline = std::chrono::steady_clock::now() + request.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now()));
  };
  stream.expires_after(left());
  // Blocking calls on a tcp_stream do not honour expires_after: run async operations on a private
  // io_context instead, so the deadline holds for every step.
  auto run = [&](auto&& start) {
    boost::system::error_code out;
    bool done = false;
    start([&](boost::system::error_code e, auto&&...) {
      out = e;
      done = true;
    });
    io.restart();
    io.run();
    if (!done) out = net::error::timed_out;
    return out;
  };
  ec = run([&](auto handler) { stream.async_connect(endpoints, handler); });
  if (ec) return client_error(url, "cannot connect to", ec);

  http::request<http::string_body> req;
  req.method_string(request.method);
  req.target(url.base_path + request.target);
  req.version(11);
  req.set(http::field::host, url.host + ":" + std::to_string(url.port));
  req.set(http::field::user_agent, "infergate-runtime");
  req.set(http::field::connection, "close");
  for (const auto& [k, v] : request.headers) req.set(k, v);
  if (!request.body.empty() || request.method == "POST") {
    req.set(http::field::content_type, request.content_type);
    req.body() = request.body;
    req.prepare_payload();
  }
  stream.expires_after(left());
  ec = run([&](auto handler) { http::async_write(stream, req, handler); });
  if (ec) return client_error(url, "cannot send the request to", ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(left());
  ec = run([&](auto handler) { http::async_read_header(stream, buffer, parser, handler); });
  if (ec) return client_error(url, "no response header from", ec);
  ClientResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get()) {
    std::string k(f.name_string());
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers.emplace_back(std::move(k), std::string(f.value()));
  }
  if (request.on_head) request.on_head(out.status, out.headers);
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    stream.expires_after(left());
    ec = run([&](auto handler) { http::async_read_some(stream, buffer, parser, handler); });
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::end_of_stream || ec == net::error::eof) break;
    if (ec) return client_error(url, "reading the response body from", ec);
    const size_t n = sizeof chunk - parser.get().body().size;
    if (n == 0) continue;
    if (request.on_data) {
      request.on_data(std::string_view(chunk, n));
    } else {
      out.body.append(chunk, n);
    }
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

void SseParser::feed(std::string_view bytes) {
  buf_.append(bytes);
  size_t start = 0;
  for (;;) {
    size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(buf_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    start = nl + 1;
    if (line.empty()) {
      if (!data_.empty()) {
        on_event_(data_);
        data_.clear();
      }
    } else if (line.substr(0, 5) == "data:") {
      std::string_view d = line.substr(5);
      if (!d.empty() && d.front() == ' ') d.remove_prefix(1);
      if (!data_.empty()) data_ += "\n";
      data_.append(d);
    }
  }
  buf_.erase(0, start);
}

}  // namespace infergate::runtime::server
