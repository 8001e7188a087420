// The HTTP/1.1 server: Beast parses requests, responses are written as raw HTTP/1.1 bytes (a status
// line, headers, a body or chunks) from a per-connection queue on the connection's strand. A connection
// is the same code over a plain socket or a TLS stream (Connection<Stream>).
#include "infergate/http/server.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <set>
#include <tuple>
#include <type_traits>

#include "infergate/common/log.h"

namespace infergate::http {
namespace {

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;
using TlsStream = ssl::stream<tcp::socket>;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string default_error_body(int, std::string_view message, std::string_view code) {
  return "{\"error\":{\"message\":\"" + json_escape(message) + "\",\"code\":\"" + json_escape(code) + "\"}}";
}

enum class Framing { kLength, kChunked };

std::string response_head(std::string_view server_name, int status, std::string_view content_type,
                          const Headers& headers, Framing framing, uint64_t content_length, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) + "\r\n";
  out += "Server: " + std::string(server_name) + "\r\n";
  if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (framing == Framing::kChunked) {
    out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  } else {
    out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  out += "\r\n";
  return out;
}

Error tls_error(std::string message) {
  return Error(ErrorCode::kInvalidArgument, "TLS: " + std::move(message), "BadTlsConfig");
}

bool is_pem_key(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  EVP_PKEY_free(key);
  return key != nullptr;
}

// An SSL context for serving, from PEM text. Every check happens here, so that a bad certificate is a
// start-up error, not a failed handshake per connection.
Result<std::shared_ptr<ssl::context>> make_tls_context(const TlsOptions& o) {
  try {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    error_code ec;
    ctx->use_certificate_chain(net::buffer(o.cert_chain_pem), ec);
    if (ec) return tls_error("the serving certificate chain is not a PEM certificate: " + ec.message());
    if (!is_pem_key(o.key_pem)) return tls_error("the serving key is not a PEM private key");
    ctx->use_private_key(net::buffer(o.key_pem), ssl::context::pem, ec);
    if (ec || SSL_CTX_check_private_key(ctx->native_handle()) != 1)
      return tls_error("the serving key does not belong to the serving certificate");
    if (!o.client_ca_pem.empty()) {
      ctx->add_certificate_authority(net::buffer(o.client_ca_pem), ec);
      if (ec) return tls_error("the client CA is not a PEM certificate: " + ec.message());
      ctx->set_verify_mode(ssl::verify_peer | (o.require_client_cert ? ssl::verify_fail_if_no_peer_cert : 0));
    } else if (o.require_client_cert) {
      return tls_error("client certificates are required but no client CA is given");
    }
    return ctx;
  } catch (const std::exception& e) {
    return tls_error(e.what());
  }
}

// The verified client certificate's subject common name, or empty.
std::string peer_common_name(SSL* ssl) {
  if (SSL_get_verify_result(ssl) != X509_V_OK) return {};
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return {};
  char cn[256] = {0};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  X509_free(cert);
  return n > 0 ? std::string(cn, static_cast<size_t>(n)) : std::string();
}

}  // namespace

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void start() = 0;
  virtual void close_from_outside() = 0;
  virtual void reject(int status, const std::string& message, std::string_view code) = 0;
};

struct Server::Impl {
  ServerOptions options;
  Handler handler;
  std::atomic<int> busy{0};
  std::atomic<int> open{0};  // before io: connections destroyed with io's handlers decrement it
  net::io_context io;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  int port = 0;
  std::mutex mu;  // guards live and tls_context
  std::set<std::weak_ptr<ConnectionBase>, std::owner_less<std::weak_ptr<ConnectionBase>>> live;
  std::shared_ptr<ssl::context> tls_context;
  std::atomic<bool> stopped{false};

  void accept();
  std::shared_ptr<ConnectionBase> make_connection(tcp::socket socket);
  std::string error_body(int status, std::string_view message, std::string_view code) const {
    return options.error_body ? options.error_body(status, message, code)
                              : default_error_body(status, message, code);
  }
};

template <class Stream>
class Connection final : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  Connection(Server::Impl* server, tcp::socket socket, std::shared_ptr<ssl::context> tls)
      : server_(server),
        strand_(net::make_strand(server->io)),
        tls_(std::move(tls)),
        stream_(make_stream(std::move(socket), tls_.get())),
        timer_(strand_) {}

  ~Connection() override { server_->open.fetch_sub(1); }

  void start() override {
    net::dispatch(strand_, [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->handshake();
      } else {
        self->read_request();
      }
    });
  }

  // Called on any thread.
  void close_from_outside() override {
    net::post(strand_, [self = this->shared_from_this()] { self->close(); });
  }

  // Over the connection cap: one error response, then close.
  void reject(int status, const std::string& message, std::string_view code) override {
    net::dispatch(strand_, [self = this->shared_from_this(), status, message, c = std::string(code)] {
      if constexpr (kTls) {
        self->rejected_ = {status, message, c};  // answered once the handshake is done
        self->handshake();
      } else {
        self->fail_request(status, message, c);
      }
    });
  }

  // --- used by ExchangeImpl, always on the strand ---
  void respond(uint64_t id, Response r) {
    if (id != exchange_id_ || response_started_ || closed_) return;
    response_started_ = true;
    response_done_ = true;
    enqueue(response_head(server_->options.server_name, r.status, r.content_type, r.headers, Framing::kLength,
                          r.body.size(), keep_alive_) +
            r.body);
  }
  void start_stream(uint64_t id, int status, const std::string& content_type, const Headers& headers,
                    std::optional<uint64_t> length) {
    if (id != exchange_id_ || response_started_ || closed_) return;
    response_started_ = true;
    streaming_ = true;
    sized_left_ = length;
    enqueue(response_head(server_->options.server_name, status, content_type, headers,
                          length ? Framing::kLength : Framing::kChunked, length.value_or(0), keep_alive_));
  }
  void write_piece(uint64_t id, const std::string& data) {
    if (id != exchange_id_ || !streaming_ || response_done_ || closed_ || data.empty()) return;
    if (sized_left_) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(*sized_left_, data.size()));
      if (n == 0) return;
      *sized_left_ -= n;
      enqueue(n == data.size() ? data : data.substr(0, n));
      return;
    }
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    enqueue(std::string(size) + data + "\r\n");
  }
  void finish(uint64_t id) {
    if (id != exchange_id_ || !streaming_ || response_done_ || closed_) return;
    if (sized_left_ && *sized_left_ > 0) {
      close();  // fewer bytes than announced: the client must see the body cut, not a short one
      return;
    }
    response_done_ = true;
    if (sized_left_) {
      if (!writing_) maybe_continue();
    } else {
      enqueue("0\r\n\r\n");
    }
  }
  void abort(uint64_t id) {
    if (id != exchange_id_ || closed_) return;
    close();
  }
  // The handler let go of the exchange: a request that got no answer gets a 500, a response left
  // unfinished is cut, so that no client waits for an answer nobody will write.
  void abandon(uint64_t id) {
    if (id != exchange_id_ || closed_ || response_done_) return;
    if (!response_started_) {
      log::error("an HTTP handler sent no response", {{"path", path_}});
      fail_request(500, "the handler sent no response", "no_response");
      return;
    }
    close();
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
  static Stream make_stream(tcp::socket socket, ssl::context* tls) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls);
    } else {
      (void)tls;
      return socket;
    }
  }
  tcp::socket& socket() { return beast::get_lowest_layer(stream_); }

  void handshake() {
    if constexpr (kTls) {
      if (handshaking_ || handshake_done_ || closed_) return;
      handshaking_ = true;
      arm_timer(server_->options.request_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              net::bind_executor(strand_, [self = this->shared_from_this()](error_code ec) {
                                self->on_handshake(ec);
                              }));
    }
  }

  void on_handshake(error_code ec) {
    if constexpr (kTls) {
      handshaking_ = false;
      timer_.cancel();
      if (closed_) return;
      if (ec) {
        log::debug("TLS handshake failed", {{"error", ec.message()}});
        close();
        return;
      }
      handshake_done_ = true;
      peer_cn_ = peer_common_name(stream_.native_handle());
      if (rejected_) {
        auto [status, message, code] = *rejected_;
        fail_request(status, message, code);
        return;
      }
      read_request();
    }
  }

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(server_->options.max_header_bytes);
    arm_timer(server_->options.request_timeout);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        net::bind_executor(
            strand_, [self = this->shared_from_this()](error_code ec, size_t) { self->on_header(ec); }));
  }

  // Headers are in: a Content-Length over the limit has already failed (body_limit) without reading
  // the body. Clients that ask "Expect: 100-continue" are told to go on before the body is read.
  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) {
      on_read(ec);
      return;
    }
    auto read_body = [self = this->shared_from_this()] {
      bhttp::async_read(
          self->stream_, self->buffer_, *self->parser_,
          net::bind_executor(self->strand_, [self](error_code e, size_t) { self->on_read(e); }));
    };
    const auto& msg = parser_->get();
    auto expect = msg.find(bhttp::field::expect);
    if (expect != msg.end() && beast::iequals(expect->value(), "100-continue") && !parser_->is_done()) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(
          stream_, net::buffer(kContinue),
          net::bind_executor(strand_, [self = this->shared_from_this(), read_body](error_code e, size_t) {
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
      on_read_error(ec);
      return;
    }
    auto& msg = parser_->get();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : msg)
      req.headers.emplace_back(lower(std::string_view(f.name_string().data(), f.name_string().size())),
                               std::string(f.value()));
    req.body = std::move(msg.body());
    req.peer_common_name = peer_cn_;
    keep_alive_ = msg.keep_alive();
    parser_.reset();
    path_ = req.path;

    response_started_ = response_done_ = streaming_ = false;
    sized_left_.reset();
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

  void on_read_error(error_code ec) {
    if (ec == bhttp::error::body_limit) {
      fail_request(
          413,
          "request body exceeds the limit of " + std::to_string(server_->options.max_body_bytes) + " bytes",
          "request_too_large");
    } else if (ec == bhttp::error::header_limit) {
      fail_request(431,
                   "request headers exceed the limit of " +
                       std::to_string(server_->options.max_header_bytes) + " bytes",
                   "headers_too_large");
    } else if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
               ec == net::error::operation_aborted || ec == net::error::connection_reset ||
               ec == net::error::bad_descriptor) {
      close();  // the client went away, or the request deadline passed
    } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category()) {
      fail_request(400, "malformed HTTP request: " + ec.message(), "invalid_http");
    } else {
      close();
    }
  }

  std::shared_ptr<Exchange> make_exchange(Request req);

  // Reports an error the HTTP layer found itself, then closes (the rest of the request is unread).
  void fail_request(int status, const std::string& message, std::string_view code) {
    keep_alive_ = false;
    response_started_ = response_done_ = true;
    ++exchange_id_;
    std::string body = server_->error_body(status, message, code);
    enqueue(response_head(server_->options.server_name, status, "application/json", {}, Framing::kLength,
                          body.size(), false) +
            body);
  }

  // While a response is pending, a read on the socket notices the client closing the connection.
  void start_monitor() {
    if (monitoring_ || closed_ || response_done_) return;
    monitoring_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        net::bind_executor(strand_, [self = this->shared_from_this()](error_code ec, size_t n) {
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
    net::async_write(stream_, net::buffer(out_.front()),
                     net::bind_executor(strand_, [self = this->shared_from_this()](error_code ec, size_t) {
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
      error_code ignored;
      socket().cancel(ignored);  // on_monitor comes back here
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
    socket().shutdown(tcp::socket::shutdown_send, ignored);
    arm_timer(std::chrono::milliseconds(2000));
    discard();
  }
  void discard() {
    if (closed_) return;
    socket().async_read_some(
        net::buffer(discard_buf_),
        net::bind_executor(strand_, [self = this->shared_from_this()](error_code ec, size_t) {
          if (ec) {
            self->close();
            return;
          }
          self->discard();
        }));
  }

  void arm_timer(std::chrono::milliseconds d) {
    timer_.expires_after(d);
    timer_.async_wait(net::bind_executor(strand_, [self = this->shared_from_this()](error_code ec) {
      if (ec) return;  // cancelled or re-armed
      if (self->response_started_ && !self->response_done_) self->mark_disconnected();
      if (self->writing_) self->mark_disconnected();
      self->close();
    }));
  }

  void mark_disconnected() {
    const bool notify = !disconnected_ && !response_done_;
    disconnected_ = true;
    disconnected_flag = true;
    if (!notify) return;
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
    socket().close(ignored);
    size_t left = 0;
    for (auto& s : out_) left += s.size();
    pending.fetch_sub(left);
    out_.clear();
  }

  Server::Impl* server_;
  net::strand<net::io_context::executor_type> strand_;
  std::shared_ptr<ssl::context> tls_;  // kept alive for the stream (null over plain HTTP)
  Stream stream_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::deque<std::string> out_;
  std::vector<std::function<void()>> on_disconnect_;
  std::optional<uint64_t> sized_left_;  // a sized response: body bytes still to come
  std::optional<std::tuple<int, std::string, std::string>> rejected_;
  std::string peer_cn_;
  std::string path_;  // of the current request, for log lines
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
  bool handshaking_ = false;
  bool handshake_done_ = false;
  std::array<char, 4096> discard_buf_{};
};

template <class Stream>
class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Connection<Stream>> conn, uint64_t id, Request req)
      : conn_(std::move(conn)), id_(id), req_(std::move(req)) {}
  ~ExchangeImpl() override {
    // Queued behind every call already made: the handler may have answered from another thread.
    net::post(conn_->strand(), [c = conn_, id = id_] { c->abandon(id); });
  }

  const Request& request() const override { return req_; }
  void respond(Response response) override {
    net::dispatch(conn_->strand(),
                  [c = conn_, id = id_, r = std::move(response)]() mutable { c->respond(id, std::move(r)); });
  }
  void start_stream(int status, std::string content_type, Headers headers) override {
    net::dispatch(conn_->strand(),
                  [c = conn_, id = id_, status, ct = std::move(content_type), h = std::move(headers)] {
                    c->start_stream(id, status, ct, h, std::nullopt);
                  });
  }
  void start_sized(int status, std::string content_type, uint64_t content_length, Headers headers) override {
    net::dispatch(conn_->strand(),
                  [c = conn_, id = id_, status, ct = std::move(content_type), content_length,
                   h = std::move(headers)] { c->start_stream(id, status, ct, h, content_length); });
  }
  void write(std::string data) override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_, d = std::move(data)] { c->write_piece(id, d); });
  }
  void finish() override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_] { c->finish(id); });
  }
  void abort() override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_] { c->abort(id); });
  }
  void on_disconnect(std::function<void()> callback) override {
    net::dispatch(conn_->strand(), [c = conn_, id = id_, cb = std::move(callback)]() mutable {
      c->add_disconnect_callback(id, std::move(cb));
    });
  }
  bool disconnected() const override { return conn_->disconnected_flag.load(); }
  size_t pending_bytes() const override { return conn_->pending.load(); }

 private:
  std::shared_ptr<Connection<Stream>> conn_;
  uint64_t id_;
  Request req_;
};

template <class Stream>
std::shared_ptr<Exchange> Connection<Stream>::make_exchange(Request req) {
  return std::make_shared<ExchangeImpl<Stream>>(this->shared_from_this(), exchange_id_, std::move(req));
}

std::shared_ptr<ConnectionBase> Server::Impl::make_connection(tcp::socket socket) {
  std::shared_ptr<ssl::context> tls;
  {
    std::lock_guard<std::mutex> lock(mu);
    tls = tls_context;
  }
  if (tls) return std::make_shared<Connection<TlsStream>>(this, std::move(socket), std::move(tls));
  return std::make_shared<Connection<tcp::socket>>(this, std::move(socket), nullptr);
}

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (!ec) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      const int now = open.fetch_add(1) + 1;
      auto conn = make_connection(std::move(socket));
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

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { stop(); }

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  if (impl->options.io_threads < 1) impl->options.io_threads = 1;
  if (impl->options.tls) {
    INFERGATE_ASSIGN_OR_RETURN(impl->tls_context, make_tls_context(*impl->options.tls));
    impl->options.tls->key_pem.clear();  // kept in the context only
  }
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
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::string& Server::host() const { return impl_->options.host; }
int Server::port() const { return impl_->port; }
bool Server::tls() const { return impl_->options.tls.has_value(); }
std::string Server::url() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return std::string(tls() ? "https://" : "http://") + host + ":" + std::to_string(impl_->port);
}
int Server::connections() const { return impl_->open.load(); }
int Server::busy() const { return impl_->busy.load(); }
bool Server::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  while (impl_->busy.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

Status Server::reload_tls(const TlsOptions& tls) {
  if (!impl_->options.tls)
    return failed_precondition("this server speaks plain HTTP: there is no TLS material to reload");
  INFERGATE_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> ctx, make_tls_context(tls));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->tls_context = std::move(ctx);
  return ok_status();
}

void Server::stop() {
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

}  // namespace infergate::http
