// The client facade over cpprestsdk. Every cpprestsdk, pplx and OpenSSL exception is caught in this
// file and turned into an Error; the deadline of each call is kept by a watchdog that cancels it.
#include "infergate/http/client.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cpprest/http_client.h>
#include <pplx/threadpool.h>
#include <atomic>
#include <boost/asio/ssl.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace infergate::http {
namespace {

namespace web_http = web::http;
using web_http::client::http_client;
using web_http::client::http_client_config;
using SteadyClock = std::chrono::steady_clock;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string find_header(const Headers& headers, std::string_view name) {
  const std::string n = lower(name);
  for (const auto& [k, v] : headers) {
    if (k == n) return v;
  }
  return {};
}

Error bad_url(std::string_view url, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument, "URL \"" + std::string(url) + "\": " + std::string(why),
               "BadUrl");
}

Status check_pem(const std::string& pem, bool key, std::string_view what) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  bool ok;
  if (key) {
    EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    ok = k != nullptr;
    EVP_PKEY_free(k);
  } else {
    X509* c = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    ok = c != nullptr;
    X509_free(c);
  }
  BIO_free(bio);
  if (!ok) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(what) + ": not a PEM " + (key ? "private key" : "certificate"), "BadTlsConfig");
  }
  return ok_status();
}

// Cancels calls whose deadline passed: one thread for the process, woken by the nearest deadline.
class Watchdog {
 public:
  static Watchdog& instance() {
    // Never destroyed: calls may still be in flight while static objects are torn down at exit.
    static Watchdog* w = new Watchdog();
    return *w;
  }

  uint64_t add(SteadyClock::time_point deadline, std::function<void()> fire) {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    const uint64_t id = ++next_id_;
    by_time_.emplace(std::make_pair(deadline, id), std::move(fire));
    by_id_[id] = deadline;
    cv_.notify_one();
    return id;
  }

  void remove(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    by_time_.erase(std::make_pair(it->second, id));
    by_id_.erase(it);
  }

 private:
  Watchdog() = default;

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (by_time_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = by_time_.begin();
      if (SteadyClock::now() < first->first.first) {
        cv_.wait_until(lock, first->first.first);
        continue;
      }
      auto fire = std::move(first->second);
      by_id_.erase(first->first.second);
      by_time_.erase(first);
      lock.unlock();
      fire();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<SteadyClock::time_point, uint64_t>, std::function<void()>> by_time_;
  std::map<uint64_t, SteadyClock::time_point> by_id_;
  uint64_t next_id_ = 0;
  std::thread thread_;
};

// What one exchange shares with the watchdog and with cancel().
struct CallState {
  pplx::cancellation_token_source cts;
  std::atomic<bool> timed_out{false};
  std::atomic<bool> cancelled{false};
  std::string what;  // "GET http://host:port/path" for messages
};

Error transport_error(const CallState& state, const std::exception& e, std::string_view during = "") {
  std::string where = state.what + (during.empty() ? "" : " (" + std::string(during) + ")");
  if (state.timed_out) return Error(ErrorCode::kDeadlineExceeded, where + ": timed out", "Timeout");
  if (state.cancelled) return Error(ErrorCode::kCancelled, where + ": cancelled", "Cancelled");
  if (const auto* he = dynamic_cast<const web_http::http_exception*>(&e)) {
    if (he->error_code() == std::errc::timed_out)
      return Error(ErrorCode::kDeadlineExceeded, where + ": timed out", "Timeout");
    if (he->error_code() == std::errc::operation_canceled)
      return Error(ErrorCode::kCancelled, where + ": cancelled", "Cancelled");
  }
  if (dynamic_cast<const pplx::task_canceled*>(&e))
    return Error(ErrorCode::kCancelled, where + ": cancelled", "Cancelled");
  return Error(ErrorCode::kUnavailable, where + ": " + e.what(), "ConnectionFailed");
}

class StreamImpl final : public ResponseStream {
 public:
  StreamImpl(std::shared_ptr<http_client> client, std::shared_ptr<CallState> state, uint64_t watch_id,
             web_http::http_response response)
      : client_(std::move(client)),
        state_(std::move(state)),
        watch_id_(watch_id),
        response_(std::move(response)) {
    status_ = response_.status_code();
    for (const auto& [k, v] : response_.headers()) {
      headers_.emplace_back(lower(utility::conversions::to_utf8string(k)),
                            utility::conversions::to_utf8string(v));
    }
    if (response_.headers().has(web_http::header_names::content_length))
      length_ = response_.headers().content_length();
    body_ = response_.body();
  }

  ~StreamImpl() override {
    if (!ended_) {
      cancel();
      try {
        response_.content_ready().wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the exchange is being torn down
      }
    }
    Watchdog::instance().remove(watch_id_);
  }

  int status() const override { return status_; }
  const Headers& headers() const override { return headers_; }
  std::optional<uint64_t> content_length() const override { return length_; }

  Result<std::optional<std::string>> read(size_t max_bytes) override {
    if (ended_) return std::optional<std::string>();
    if (state_->cancelled && !state_->timed_out)
      return Error(ErrorCode::kCancelled, state_->what + ": cancelled", "Cancelled");
    if (max_bytes == 0) max_bytes = 1;
    std::string out;
    try {
      auto sb = body_.streambuf();
      size_t avail = sb.in_avail();
      if (avail == 0) {
        auto c = sb.bumpc().get();  // waits for one byte, the end, or an error
        if (c == std::char_traits<char>::eof()) {
          // A clean end and a cut connection both look like EOF here; the response's completion
          // tells them apart.
          try {
            response_.content_ready().get();
          } catch (const std::exception& e) {
            return finish_with(transport_error(*state_, e, "reading the body"));
          }
          ended_ = true;
          Watchdog::instance().remove(watch_id_);
          return std::optional<std::string>();
        }
        out.push_back(static_cast<char>(c));
        avail = sb.in_avail();
      }
      const size_t n = std::min(avail, max_bytes - out.size());
      if (n > 0) {
        const size_t old = out.size();
        out.resize(old + n);
        const size_t got = sb.getn(reinterpret_cast<uint8_t*>(out.data() + old), n).get();
        out.resize(old + got);
      }
    } catch (const std::exception& e) {
      return finish_with(transport_error(*state_, e, "reading the body"));
    }
    return std::optional<std::string>(std::move(out));
  }

  void cancel() override {
    if (!state_->cancelled.exchange(true)) state_->cts.cancel();
  }

 private:
  Error finish_with(Error e) {
    cancel();
    return e;
  }

  std::shared_ptr<http_client> client_;  // kept for the life of the exchange
  std::shared_ptr<CallState> state_;
  uint64_t watch_id_;
  web_http::http_response response_;
  concurrency::streams::istream body_;
  int status_ = 0;
  Headers headers_;
  std::optional<uint64_t> length_;
  bool ended_ = false;
};

}  // namespace

std::string ClientResponse::header(std::string_view name) const { return find_header(headers, name); }
std::string ResponseStream::header(std::string_view name) const { return find_header(headers(), name); }

Result<std::string> ResponseStream::read_all(uint64_t max_body) {
  if (auto len = content_length(); len && *len > max_body) {
    cancel();
    return Error(ErrorCode::kResourceExhausted,
                 "a response body of " + std::to_string(*len) + " bytes is over the cap of " +
                     std::to_string(max_body),
                 "BodyTooLarge");
  }
  std::string body;
  for (;;) {
    INFERGATE_ASSIGN_OR_RETURN(std::optional<std::string> piece, read(1u << 20));
    if (!piece) return body;
    if (body.size() + piece->size() > max_body) {
      cancel();
      return Error(ErrorCode::kResourceExhausted,
                   "the response body is over the cap of " + std::to_string(max_body) + " bytes",
                   "BodyTooLarge");
    }
    body += *piece;
  }
}

Result<std::pair<std::string, std::string>> split_url(std::string_view url) {
  size_t scheme_end;
  if (url.rfind("http://", 0) == 0) {
    scheme_end = 7;
  } else if (url.rfind("https://", 0) == 0) {
    scheme_end = 8;
  } else {
    return bad_url(url, "not an http:// or https:// URL");
  }
  size_t path = url.find_first_of("/?#", scheme_end);
  std::string origin(url.substr(0, path));
  if (origin.size() == scheme_end) return bad_url(url, "no host");
  if (url.find_first_of(" \r\n\t") != std::string_view::npos) return bad_url(url, "contains white space");
  std::string rest = path == std::string_view::npos ? "/" : std::string(url.substr(path));
  if (size_t hash = rest.find('#'); hash != std::string::npos) rest.resize(hash);
  if (rest.empty() || rest.front() == '?') rest = "/" + rest;
  return std::make_pair(std::move(origin), std::move(rest));
}

struct Client::Impl {
  ClientOptions options;
  http_client_config config;
  std::shared_ptr<http_client> client;

  // A client whose own inactivity limit is not shorter than the call's deadline.
  Result<std::shared_ptr<http_client>> client_for(std::chrono::milliseconds timeout) {
    if (timeout <= options.timeout) return client;
    http_client_config cfg = config;
    cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    try {
      return std::make_shared<http_client>(utility::conversions::to_string_t(options.base_url), cfg);
    } catch (const std::exception& e) {
      return bad_url(options.base_url, e.what());
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
const ClientOptions& Client::options() const { return impl_->options; }

Result<std::unique_ptr<Client>> Client::create(ClientOptions options) {
  INFERGATE_ASSIGN_OR_RETURN(auto parts, split_url(options.base_url));
  (void)parts;
  while (options.base_url.size() > parts.first.size() && options.base_url.back() == '/')
    options.base_url.pop_back();
  const bool https = options.base_url.rfind("https://", 0) == 0;
  const ClientTls& tls = options.tls;
  if (!tls.ca_pem.empty()) INFERGATE_RETURN_IF_ERROR(check_pem(tls.ca_pem, false, "certificate authority"));
  if (!tls.client_cert_pem.empty() || !tls.client_key_pem.empty()) {
    INFERGATE_RETURN_IF_ERROR(check_pem(tls.client_cert_pem, false, "client certificate"));
    INFERGATE_RETURN_IF_ERROR(check_pem(tls.client_key_pem, true, "client key"));
  }
  if (options.timeout.count() <= 0) options.timeout = std::chrono::seconds(30);
  auto impl = std::make_unique<Impl>();
  http_client_config& cfg = impl->config;
  cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.timeout));
  cfg.set_max_redirects(0);
  cfg.set_validate_certificates(!tls.insecure_skip_verify);
  if (https) {
    std::string ca = tls.ca_pem, cert = tls.client_cert_pem, key = tls.client_key_pem;
    cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;  // checked above: the material parses
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca.data(), ca.size()), ec);
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()), ec);
        ctx.use_private_key(boost::asio::buffer(key.data(), key.size()), boost::asio::ssl::context::pem, ec);
      }
    });
  }
  impl->options = std::move(options);
  try {
    impl->client =
        std::make_shared<http_client>(utility::conversions::to_string_t(impl->options.base_url), cfg);
  } catch (const std::exception& e) {
    return bad_url(impl->options.base_url, e.what());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<ResponseStream>> Client::open(const ClientRequest& request) {
  const auto timeout = request.timeout.count() > 0 ? request.timeout : impl_->options.timeout;
  auto state = std::make_shared<CallState>();
  state->what = request.method + " " + impl_->options.base_url + request.target;
  INFERGATE_ASSIGN_OR_RETURN(std::shared_ptr<http_client> client, impl_->client_for(timeout));
  const uint64_t watch_id = Watchdog::instance().add(SteadyClock::now() + timeout, [state] {
    state->timed_out = true;
    state->cts.cancel();
  });
  try {
    web_http::http_request req(utility::conversions::to_string_t(request.method));
    req.set_request_uri(utility::conversions::to_string_t(request.target.empty() ? "/" : request.target));
    bool has_agent = false;
    for (const auto& [k, v] : request.headers) {
      if (lower(k) == "user-agent") has_agent = true;
      req.headers().add(utility::conversions::to_string_t(k), utility::conversions::to_string_t(v));
    }
    if (!has_agent && !impl_->options.user_agent.empty())
      req.headers().add(U("User-Agent"), utility::conversions::to_string_t(impl_->options.user_agent));
    if (!request.body.empty() || !request.content_type.empty()) {
      req.set_body(request.body, request.content_type.empty() ? std::string("application/octet-stream")
                                                              : request.content_type);
    }
    web_http::http_response resp = client->request(req, state->cts.get_token()).get();
    return std::unique_ptr<ResponseStream>(
        std::make_unique<StreamImpl>(std::move(client), state, watch_id, std::move(resp)));
  } catch (const std::exception& e) {
    Watchdog::instance().remove(watch_id);
    return transport_error(*state, e);
  }
}

Result<ClientResponse> Client::call(const ClientRequest& request) {
  INFERGATE_ASSIGN_OR_RETURN(std::unique_ptr<ResponseStream> stream, open(request));
  ClientResponse out;
  out.status = stream->status();
  out.headers = stream->headers();
  auto body = stream->read_all(request.max_body);
  if (!body.ok())
    return std::move(body).error().context(request.method + " " + impl_->options.base_url + request.target);
  out.body = std::move(*body);
  return out;
}

namespace {

// A client for the scheme and host of `url`, with `request` aimed at its path (fetch, fetch_stream).
Result<std::unique_ptr<Client>> client_for(std::string_view url, ClientRequest& request, ClientTls tls) {
  INFERGATE_ASSIGN_OR_RETURN(auto parts, split_url(url));
  ClientOptions o;
  o.base_url = parts.first;
  o.tls = std::move(tls);
  if (request.timeout.count() > 0) o.timeout = request.timeout;
  request.target = parts.second;
  return Client::create(std::move(o));
}

}  // namespace

Result<ClientResponse> fetch(std::string_view url, ClientRequest request, ClientTls tls) {
  INFERGATE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, client_for(url, request, std::move(tls)));
  return client->call(request);
}

Result<std::unique_ptr<ResponseStream>> fetch_stream(std::string_view url, ClientRequest request,
                                                     ClientTls tls) {
  INFERGATE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, client_for(url, request, std::move(tls)));
  return client->open(request);  // the stream keeps the transport alive, not the Client object
}

Status configure_client_threads(size_t threads) {
  try {
    crossplat::threadpool::initialize_with_threads(threads);
  } catch (const std::exception& e) {
    return failed_precondition(std::string("the HTTP client's thread pool is already running: ") + e.what());
  }
  return ok_status();
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

}  // namespace infergate::http
