// The HTTP/1.1 server: Beast parses requests, responses are written as raw HTTP/1.1 bytes (a status
// line, headers, a body or chunks) from a per-connection queue on the connection's strand.
#include "infergate/runtime/server/http_server.h"

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "infergate/common/log.h"

namespace infergate::runtime::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string default_error_body(int status, std::string_view message, std::string_view code) {
  (void)status;
  return "{\"error\":{\"message\":\"" + std::string(message) + "\",\"code\":\"" + std::string(code) + "\"}}";
}

std::string response_head(int status, std::string_view content_type, const Headers& headers, bool chunked,
                          size_t content_length, bool keep_alive) {
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(http_status_text(status)) + "\r\n";
  out += "Server: infergate-runtime\r\n";
  if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (chunked) {
    out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  } else {
    out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  out += "\r\n";
  return out;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  const std::string n = lower(name);
  for (const auto& [k, v] : headers) {
    if (k == n) return v;
  }
  return {};
}

std::string_view http_status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

class Connection;

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::atomic<int> busy{0};
  std::atomic<int> open{0};  // before io: connections destroyed with io's handlers decrement it
  net::io_context io;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  int port = 0;
  std::mutex mu;
  std::set<std::weak_ptr<Connection>, std::owner_less<std::weak_ptr<Connection>>> live;
  std::atomic<bool> stopped{false};

  void accept();
  std::string error_body(int status, std::string_view message, std::string_view code) const {
    return options.error_body ? options.error_body(status, message, code)
                              : default_error_body(status, message, code);
  }
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl* server, tcp::socket socket)
      : server_(server), strand_(net::make_strand(server->io)), socket_(std::move(socket)), timer_(strand_) {}

  ~Connection() { server_->open.fetch_sub(1); }

  void start() {
    net::dispatch(strand_, [self = shared_from_this()] { self->read_request(); });
  }

  // Called on any thread.
  void close_from_outside() {
    net::post(strand_, [self = shared_from_this()] { self->close(); });
  }

  // --- used by ExchangeImpl, always on the strand ---
  void respond(uint64_t id, HttpResponse r) {
    if (id != exchange_id_ || response_started_ || closed_) return;
    response_started_ = true;
    response_done_ = true;
    enqueue(response_head(r.status, r.content_type, r.headers, false, r.body.size(), keep_alive_) + r.body);
  }
  void start_stream(uint64_t id, int status, const std::string& content_type, const Headers& headers) {
    if (id != exchange_id_ || response_started_ || closed_) return;
    response_started_ = true;
    streaming_ = true;
    enqueue(response_head(status, content_type, headers, true, 0, keep_alive_));
  }
  void write_chunk(uint64_t id, const std::string& data) {
    if (id != exchange_id_ || !streaming_ || response_done_ || closed_ || data.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    enqueue(std::string(size) + data + "\r\n");
  }
  void finish(uint64_t id) {
    if (id != exchange_id_ || !streaming_ || response_done_ || closed_) return;
    response_done_ = true;
    enqueue("0\r\n\r\n");
  }
  void add_disconnect_callback(uint64_t id, std::function<void()> cb) {
    if (id != exchange_id_ || response_done_) return;
    if (disconnected_) {
      cb();
      return;
    }
    on_disconnect_.push_back(std::move(cb));
  }

  net::strand<net::io_context::executor_type>& strand() { return strand_; }
  std::atomic<bool> disconnected_flag{false};
  std::atomic<size_t> pending{0};

 private:
  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(server_->options.max_header_bytes);
    arm_timer(server_->options.request_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            net::bind_executor(strand_, [self = shared_from_this()](error_code ec, size_t) {
                              self->on_header(ec);
                            }));
  }

  // Headers are in: a Content-Length over the limit has already failed (body_limit) without reading
  // the body. Clients that ask "Expect: 100-continue" are told to go on before the body is read.
  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) {
      on_read(ec);
      return;
    }
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->socket_, self->buffer_, *self->parser_,
                       net::bind_executor(self->strand_, [self](error_code e, size_t) { self->on_read(e); }));
    };
    const auto& msg = parser_->get();
    auto expect = msg.find(http::field::expect);
    if (expect != msg.end() && beast::iequals(expect->value(), "100-continue") && !parser_->is_done()) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(
          socket_, net::buffer(kContinue),
          net::bind_executor(strand_, [self = shared_from_this(), read_body](error_code e, size_t) {
            if (e) {
              self->close();
              return;
            }
            read_body();
          }));
      return;
    }
    read_body();
  }

  void on_read(error_code ec) {
    timer_.cancel();
    if (closed_) return;
    if (ec) {
      if (ec == http::error::body_limit) {
        fail_request(
            413,
            "request body exceeds the limit of " + std::to_string(server_->options.max_body_bytes) + " bytes",
            "request_too_large");
      } else if (ec == http::error::header_limit) {
        fail_request(431,
                     "request headers exceed the limit of " +
                         std::to_string(server_->options.max_header_bytes) + " bytes",
                     "headers_too_large");
      } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
                 ec == net::error::operation_aborted || ec == net::error::connection_reset ||
                 ec == net::error::bad_descriptor) {
        close();  // the client went away, or the request deadline passed
      } else if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
        fail_request(400, "malformed HTTP request: " + ec.message(), "invalid_http");
      } else {
        close();
      }
      return;
    }
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : msg)
      req.headers.emplace_back(lower(std::string_view(f.name_string().data(), f.name_string().size())),
                               std::string(f.value()));
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive();
    parser_.reset();

    response_started_ = response_done_ = streaming_ = false;
    on_disconnect_.clear();
    ++exchange_id_;
    auto exchange = make_exchange(std::move(req));
    busy_ = true;
    server_->busy.fetch_add(1);
    server_->handler(exchange);
    if (!response_done_)
      start_monitor();
    else
      maybe_continue();
  }

  std::shared_ptr<Exchange> make_exchange(HttpRequest req);

  // Reports an error the HTTP layer found itself, then closes (the rest of the request is unread).
  void fail_request(int status, const std::string& message, std::string_view code) {
    keep_alive_ = false;
    response_started_ = response_done_ = true;
    ++exchange_id_;
    std::string body = server_->error_body(status, message, code);
    enqueue(response_head(status, "application/json", {}, false, body.size(), false) + body);
  }

 public:
  // Over the connection cap: one error response, then close.
  void reject(int status, const std::string& message, std::string_view code) {
    net::dispatch(strand_, [self = shared_from_this(), status, message, c = std::string(code)] {
      self->fail_request(status, message, c);
    });
  }

 private:
  // While a response is pending, a read on the socket notices the client closing the connection.
  void start_monitor() {
    if (monitoring_ || closed_ || response_done_) return;
    monitoring_ = true;
    socket_.async_read_some(buffer_.prepare(4096),
                            net::bind_executor(strand_, [self = shared_from_this()](error_code ec, size_t n) {
                              self->on_monitor(ec, n);
                            }));
  }

  void on_monitor(error_code ec, size_t n) {
    monitoring_ = false;
    if (closed_) return;
    if (ec == net::error::operation_aborted && !socket_closing_) {
      // Cancelled because the response finished: go on with the next request.
      maybe_continue();
      return;
    }
    if (ec) {
      mark_disconnected();
      close();
      return;
    }
    buffer_.commit(n);  // a pipelined request: kept for the parser
    if (buffer_.size() > server_->options.max_header_bytes + server_->options.max_body_bytes) {
      return;  // stop watching a client that floods; the write deadline still applies
    }
    if (!response_done_)
      start_monitor();
    else
      maybe_continue();
  }

  void enqueue(std::string bytes) {
    pending.fetch_add(bytes.size());
    out_.push_back(std::move(bytes));
    if (!writing_) do_write();
  }

  void do_write() {
    if (closed_) return;
    if (out_.empty()) {
      writing_ = false;
      timer_.cancel();
      maybe_continue();
      return;
    }
    writing_ = true;
    arm_timer(server_->options.write_timeout);
    net::async_write(socket_, net::buffer(out_.front()),
                     net::bind_executor(strand_, [self = shared_from_this()](error_code ec, size_t) {
                       self->on_write(ec);
                     }));
  }

  void on_write(error_code ec) {
    if (!out_.empty()) {
      pending.fetch_sub(out_.front().size());
      out_.pop_front();
    }
    if (ec) {
      writing_ = false;
      mark_disconnected();
      close();
      return;
    }
    do_write();
  }

  void release_busy() {
    if (busy_) {
      busy_ = false;
      server_->busy.fetch_sub(1);
    }
  }

  // After a complete response: the next request on a keep-alive connection, or close.
  void maybe_continue() {
    if (closed_ || !response_done_ || writing_ || !out_.empty()) return;
    release_busy();
    if (monitoring_) {
      socket_.cancel();  // on_monitor comes back here
      return;
    }
    if (!keep_alive_) {
      linger_close();
      return;
    }
    read_request();
  }

  // Half-close, then discard what the client still sends for a moment, so that a client still sending
  // a refused body reads our answer instead of a connection reset.
  void linger_close() {
    if (lingering_) return;
    lingering_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm_timer(std::chrono::milliseconds(2000));
    discard();
  }
  void discard() {
    if (closed_) return;
    socket_.async_read_some(net::buffer(discard_buf_),
                            net::bind_executor(strand_, [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->discard();
                            }));
  }

  void arm_timer(std::chrono::milliseconds d) {
    timer_.expires_after(d);
    timer_.async_wait(net::bind_executor(strand_, [self = shared_from_this()](error_code ec) {
      if (ec) return;  // cancelled or re-armed
      if (self->response_started_ && !self->response_done_) self->mark_disconnected();
      if (self->writing_) self->mark_disconnected();
      self->close();
    }));
  }

  void mark_disconnected() {
    if (disconnected_ || response_done_) {
      disconnected_ = true;
      disconnected_flag = true;
      return;
    }
    disconnected_ = true;
    disconnected_flag = true;
    auto callbacks = std::move(on_disconnect_);
    on_disconnect_.clear();
    for (auto& cb : callbacks) cb();
  }

  void close() {
    release_busy();
    if (closed_) return;
    if (!response_done_ && exchange_id_ > 0) mark_disconnected();
    closed_ = true;
    socket_closing_ = true;
    error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
    size_t left = 0;
    for (auto& s : out_) left += s.size();
    pending.fetch_sub(left);
    out_.clear();
  }

  HttpServer::Impl* server_;
  net::strand<net::io_context::executor_type> strand_;
  tcp::socket socket_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  std::vector<std::function<void()>> on_disconnect_;
  uint64_t exchange_id_ = 0;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool monitoring_ = false;
  bool response_started_ = false;
  bool response_done_ = false;
  bool streaming_ = false;
  bool disconnected_ = false;
  bool closed_ = false;
  bool socket_closing_ = false;
  bool lingering_ = false;
  bool busy_ = false;
  std::array<char, 4096> discard_buf_{};
};

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Connection> conn, uint64_t id, HttpRequest req)
      : conn_(std::move(conn)), id_(id), req_(std::move(req)) {}

  const HttpRequest& request() const override { return req_; }
  void respond(HttpResponse response) override {
    net::dispatch(conn_->strand(),
                  [c = conn_, id = id_, r = std::move(response)]() mutable { c->respond(id, std::move(r)); });
  }
  void start_stream(int status, std::string content_type, Headers headers) override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_, status, ct = std::move(content_type),
                                    h = std::move(headers)] { c->start_stream(id, status, ct, h); });
  }
  void write(std::string data) override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_, d = std::move(data)] { c->write_chunk(id, d); });
  }
  void finish() override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_] { c->finish(id); });
  }
  void on_disconnect(std::function<void()> callback) override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_, cb = std::move(callback)]() mutable {
      c->add_disconnect_callback(id, std::move(cb));
    });
  }
  bool disconnected() const override { return conn_->disconnected_flag.load(); }
  size_t pending_bytes() const override { return conn_->pending.load(); }

 private:
  std::shared_ptr<Connection> conn_;
  uint64_t id_;
  HttpRequest req_;
};

std::shared_ptr<Exchange> Connection::make_exchange(HttpRequest req) {
  return std::make_shared<ExchangeImpl>(shared_from_this(), exchange_id_, std::move(req));
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (!ec) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      const int now = open.fetch_add(1) + 1;
      auto conn = std::make_shared<Connection>(this, std::move(socket));
      if (now > options.max_connections) {
        log::warn("connection refused: too many open connections", {{"limit", options.max_connections}});
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = live.begin(); it != live.end();) it = it->expired() ? live.erase(it) : std::next(it);
        live.insert(conn);
      }
      if (now > options.max_connections) {
        conn->reject(503, "too many open connections", "too_many_connections");
      } else {
        conn->start();
      }
    } else if (ec == net::error::operation_aborted) {
      return;
    }
    accept();
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(HttpServerOptions options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  if (impl->options.io_threads < 1) impl->options.io_threads = 1;
  error_code ec;
  net::ip::address address = net::ip::make_address(impl->options.host, ec);
  if (ec) {
    tcp::resolver resolver(impl->io);
    auto results = resolver.resolve(impl->options.host, std::to_string(impl->options.port), ec);
    if (ec || results.empty()) {
      return Error(ErrorCode::kInvalidArgument, "cannot resolve host '" + impl->options.host + "'",
                   "BindFailed")
          .with_detail("host", impl->options.host);
    }
    address = results.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(impl->options.port));
  auto bind_error = [&](std::string_view what) {
    return Error(ErrorCode::kUnavailable,
                 std::string(what) + " " + impl->options.host + ":" + std::to_string(impl->options.port) +
                     ": " + ec.message(),
                 "BindFailed")
        .with_detail("host", impl->options.host);
  };
  impl->acceptor.open(endpoint.protocol(), ec);
  if (ec) return bind_error("cannot open a socket for");
  impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  impl->acceptor.bind(endpoint, ec);
  if (ec) return bind_error("cannot bind");
  impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return bind_error("cannot listen on");
  impl->port = impl->acceptor.local_endpoint().port();
  impl->work.emplace(impl->io.get_executor());
  impl->accept();
  for (int i = 0; i < impl->options.io_threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] {
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {
          // A handler must not throw; if one does, the server keeps serving and says so.
          log::error("exception escaped an HTTP handler", {{"what", e.what()}});
        }
      }
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

const std::string& HttpServer::host() const { return impl_->options.host; }
int HttpServer::port() const { return impl_->port; }
int HttpServer::connections() const { return impl_->open.load(); }
int HttpServer::busy() const { return impl_->busy.load(); }
bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  while (impl_->busy.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  net::post(impl_->io, [impl = impl_.get()] {
    error_code ignored;
    impl->acceptor.close(ignored);
  });
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& w : impl_->live) {
      if (auto c = w.lock()) c->close_from_outside();
    }
    impl_->live.clear();
  }
  impl_->work.reset();
  // Connections finish closing; pending handlers drain; then the threads return.
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
}

}  // namespace infergate::runtime::server
