// RestClient over cpprestsdk. Every cpprestsdk and OpenSSL exception is caught in this file and turned
// into an Error; nothing above sees one.
#include "infergate/operator/client/rest_client.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <pplx/threadpool.h>
#include <boost/asio/ssl.hpp>

#include "infergate/common/log.h"

namespace infergate::op::client {
namespace {

namespace http = web::http;
using http::client::http_client;
using http::client::http_client_config;

std::string url_encode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      (void)std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

void add_param(std::string& q, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  q += q.empty() ? '?' : '&';
  q += std::string(key) + "=" + url_encode(value);
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
  if (!ok)
    return invalid_argument(std::string(what) + ": not a PEM " + (key ? "private key" : "certificate"));
  return ok_status();
}

struct HttpRequest {
  std::string method;
  std::string path_and_query;
  std::string body;
  std::string content_type;
  std::string accept = "application/json";
  std::string what;  // "get deployments.apps default/web" for messages
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string retry_after;
};

Error transport_error(const std::exception& e, std::string_view what) {
  if (const auto* he = dynamic_cast<const http::http_exception*>(&e)) {
    if (he->error_code() == std::errc::timed_out) {
      return Error(ErrorCode::kDeadlineExceeded, std::string(what) + ": timed out", "Timeout");
    }
    if (he->error_code() == std::errc::operation_canceled) {
      return Error(ErrorCode::kCancelled, std::string(what) + ": cancelled", "Cancelled");
    }
  }
  if (dynamic_cast<const pplx::task_canceled*>(&e)) {
    return Error(ErrorCode::kCancelled, std::string(what) + ": cancelled", "Cancelled");
  }
  return Error(ErrorCode::kUnavailable, std::string(what) + ": " + e.what(), "ConnectionFailed");
}

constexpr size_t kMaxWatchLine = 16u << 20;

// One open watch: the response body read as chunks arrive and split into lines.
class RestWatchStream final : public WatchStream {
 public:
  RestWatchStream(std::unique_ptr<http_client> client, pplx::cancellation_token_source cts,
                  http::http_response response, std::string what)
      : client_(std::move(client)),
        cts_(std::move(cts)),
        response_(std::move(response)),
        what_(std::move(what)) {
    body_ = response_.body();
  }

  ~RestWatchStream() override {
    cancel();
    try {
      response_.content_ready().wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the stream is being torn down
    }
  }

  Result<std::optional<WatchEvent>> next() override {
    for (;;) {
      if (cancelled_) return Error(ErrorCode::kCancelled, what_ + ": cancelled", "Cancelled");
      std::string line;
      size_t nl = pending_.find('\n');
      if (nl == std::string::npos) {
        // Read what has arrived in bulk: cpprestsdk's read_line costs a task per character.
        try {
          auto sb = body_.streambuf();
          size_t avail = sb.in_avail();
          if (avail == 0) {
            auto c = sb.bumpc().get();  // waits for one byte, the end, or an error
            if (c == std::char_traits<char>::eof()) {
              // A clean end (terminating chunk) or a cut connection both look like EOF here; the
              // response's completion tells them apart.
              try {
                response_.content_ready().get();
              } catch (const std::exception& e) {
                if (cancelled_) return Error(ErrorCode::kCancelled, what_ + ": cancelled", "Cancelled");
                return transport_error(e, what_ + ": stream broke");
              }
              return std::optional<WatchEvent>();
            }
            pending_.push_back(static_cast<char>(c));
            avail = sb.in_avail();
          }
          if (avail > 0) {
            size_t old = pending_.size();
            pending_.resize(old + avail);
            size_t n = sb.getn(reinterpret_cast<uint8_t*>(pending_.data() + old), avail).get();
            pending_.resize(old + n);
          }
        } catch (const std::exception& e) {
          if (cancelled_) return Error(ErrorCode::kCancelled, what_ + ": cancelled", "Cancelled");
          return transport_error(e, what_ + ": stream broke");
        }
        if (pending_.size() > kMaxWatchLine) {
          return Error(ErrorCode::kDataLoss, what_ + ": a watch event longer than 16 MiB",
                       "MalformedWatchEvent");
        }
        continue;
      }
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
      if (line.empty()) continue;
      auto j = parse_json(line, "watch event");
      if (!j.ok() || !j->is_object()) {
        return Error(ErrorCode::kDataLoss, what_ + ": malformed watch event", "MalformedWatchEvent");
      }
      std::string type = j->value("type", "");
      WatchEvent ev;
      if (type == "ADDED") {
        ev.type = WatchEventType::kAdded;
      } else if (type == "MODIFIED") {
        ev.type = WatchEventType::kModified;
      } else if (type == "DELETED") {
        ev.type = WatchEventType::kDeleted;
      } else if (type == "BOOKMARK") {
        ev.type = WatchEventType::kBookmark;
      } else if (type == "ERROR") {
        ev.type = WatchEventType::kError;
      } else {
        return Error(ErrorCode::kDataLoss,
                     what_ + ": unknown watch event type \"" + type.substr(0, 32) + "\"",
                     "MalformedWatchEvent");
      }
      auto obj = j->find("object");
      if (obj == j->end() || !obj->is_object()) {
        return Error(ErrorCode::kDataLoss, what_ + ": watch event without an object", "MalformedWatchEvent");
      }
      ev.object = std::move(*obj);
      return std::optional<WatchEvent>(std::move(ev));
    }
  }

  void cancel() override {
    if (!cancelled_.exchange(true)) cts_.cancel();
  }

 private:
  std::unique_ptr<http_client> client_;
  pplx::cancellation_token_source cts_;
  http::http_response response_;
  concurrency::streams::istream body_;
  std::string what_;
  std::string pending_;  // received bytes not yet returned as events
  std::atomic<bool> cancelled_{false};
};

}  // namespace

Status configure_transport_threads(size_t threads) {
  try {
    crossplat::threadpool::initialize_with_threads(threads);
  } catch (const std::exception& e) {
    return failed_precondition(std::string("the HTTP transport's thread pool is already running: ") +
                               e.what());
  }
  return ok_status();
}

std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int attempt, std::mt19937_64& rng) {
  double base = static_cast<double>(p.initial_backoff.count());
  for (int i = 1; i < attempt && base < static_cast<double>(p.max_backoff.count()); ++i) base *= 2;
  base = std::min(base, static_cast<double>(p.max_backoff.count()));
  std::uniform_real_distribution<double> dist(1.0, 1.0 + std::max(0.0, p.jitter));
  return std::chrono::milliseconds(static_cast<int64_t>(base * dist(rng)));
}

struct RestClient::Impl {
  std::unique_ptr<http_client> client;
  http_client_config base_config;
  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};
};

RestClient::RestClient(RestConfig config, RetryPolicy retry, Clock* clock)
    : config_(std::move(config)),
      retry_(retry),
      clock_(clock ? clock : &SystemClock::instance()),
      impl_(std::make_unique<Impl>()) {}

RestClient::~RestClient() = default;

Result<std::unique_ptr<RestClient>> RestClient::create(RestConfig config, RetryPolicy retry, Clock* clock) {
  if (config.server.empty()) return invalid_argument("API server URL is empty");
  bool https = config.server.rfind("https://", 0) == 0;
  if (!https && config.server.rfind("http://", 0) != 0) {
    return invalid_argument("API server URL \"" + config.server + "\" is not http(s)");
  }
  if (!config.ca_pem.empty())
    INFERGATE_RETURN_IF_ERROR(check_pem(config.ca_pem, false, "certificate authority"));
  if (!config.client_cert_pem.empty()) {
    INFERGATE_RETURN_IF_ERROR(check_pem(config.client_cert_pem, false, "client certificate"));
    INFERGATE_RETURN_IF_ERROR(check_pem(config.client_key_pem, true, "client key"));
  }
  if (retry.max_attempts < 1) retry.max_attempts = 1;
  std::unique_ptr<RestClient> c(new RestClient(std::move(config), retry, clock));
  http_client_config cfg;
  cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(c->config_.timeout));
  cfg.set_validate_certificates(!c->config_.insecure_skip_tls_verify);
  if (https) {
    std::string ca = c->config_.ca_pem, cert = c->config_.client_cert_pem, key = c->config_.client_key_pem;
    cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca.data(), ca.size()), ec);
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()), ec);
        ctx.use_private_key(boost::asio::buffer(key.data(), key.size()), boost::asio::ssl::context::pem, ec);
      }
    });
  }
  c->impl_->base_config = cfg;
  try {
    c->impl_->client =
        std::make_unique<http_client>(utility::conversions::to_string_t(c->config_.server), cfg);
  } catch (const std::exception& e) {
    return invalid_argument("API server URL \"" + c->config_.server + "\": " + e.what());
  }
  return c;
}

namespace {

// One attempt, no retries.
Result<HttpResponse> send_once(http_client& client, const RestConfig& config, const HttpRequest& r) {
  try {
    http::http_request req(utility::conversions::to_string_t(r.method));
    req.set_request_uri(utility::conversions::to_string_t(r.path_and_query));
    req.headers().add(U("Accept"), utility::conversions::to_string_t(r.accept));
    req.headers().add(U("User-Agent"), utility::conversions::to_string_t(config.user_agent));
    if (config.token) {
      auto token = config.token->token();
      if (!token.ok()) return std::move(token).error().context(r.what);
      if (!token->empty())
        req.headers().add(U("Authorization"), utility::conversions::to_string_t("Bearer " + *token));
    }
    if (!r.content_type.empty()) req.set_body(r.body, r.content_type);
    http::http_response resp = client.request(req).get();
    HttpResponse out;
    out.status = resp.status_code();
    auto ra = resp.headers().find(U("Retry-After"));
    if (ra != resp.headers().end()) out.retry_after = utility::conversions::to_utf8string(ra->second);
    out.body = resp.extract_utf8string(true).get();
    return out;
  } catch (const std::exception& e) {
    return transport_error(e, r.what);
  }
}

}  // namespace

namespace {

// Sends with retries; returns the body of a 2xx response or the classified error.
Result<std::string> send(http_client& client, const RestConfig& config, const RetryPolicy& retry,
                         Clock& clock, std::mutex& rng_mu, std::mt19937_64& rng, RequestObserver* observer,
                         const HttpRequest& r) {
  for (int attempt = 1;; ++attempt) {
    auto start = std::chrono::steady_clock::now();
    auto res = send_once(client, config, r);
    if (observer) {
      std::string_view verb = r.method;
      observer->on_request(verb, res.ok() ? res->status : 0, std::chrono::steady_clock::now() - start);
    }
    std::optional<Error> err;
    std::string retry_after_header;
    if (!res.ok()) {
      err = std::move(res).error();
    } else if (res->status >= 200 && res->status < 300) {
      return std::move(res->body);
    } else {
      err = api_error(res->status, res->body, r.what);
      retry_after_header = res->retry_after;
    }
    if (!is_retryable(*err) || attempt >= retry.max_attempts) {
      if (attempt > 1) err->context("after " + std::to_string(attempt) + " attempts");
      return std::move(*err);
    }
    std::chrono::milliseconds delay;
    long retry_after = -1;
    if (!retry_after_header.empty()) {
      char* end = nullptr;
      retry_after = std::strtol(retry_after_header.c_str(), &end, 10);
      if (!end || *end || retry_after < 0) retry_after = -1;
    }
    if (retry_after >= 0) {
      delay = std::min<std::chrono::milliseconds>(std::chrono::seconds(retry_after), retry.max_retry_after);
    } else {
      std::lock_guard lock(rng_mu);
      delay = backoff_delay(retry, attempt, rng);
    }
    log::debug("retrying API request", {{"request", r.what},
                                        {"attempt", attempt},
                                        {"error", err->to_string()},
                                        {"delay_ms", static_cast<long long>(delay.count())}});
    clock.sleep_for(delay);
  }
}

Result<Json> parse_body(const Result<std::string>& body, std::string_view what) {
  if (!body.ok()) return body.error();
  if (body->empty()) return Json::object();
  auto j = parse_json(*body, what);
  if (!j.ok())
    return Error(ErrorCode::kDataLoss, std::string(what) + ": the API server sent malformed JSON",
                 "MalformedResponse");
  return std::move(*j);
}

std::string describe(std::string_view verb, const ResourceKind& kind, std::string_view ns,
                     std::string_view name) {
  std::string s = std::string(verb) + " " + kind.resource();
  if (!ns.empty() || !name.empty()) s += " ";
  if (!ns.empty()) s += std::string(ns) + (name.empty() ? "" : "/");
  s += std::string(name);
  return s;
}

}  // namespace

#define INFERGATE_SEND(req) \
  send(*impl_->client, config_, retry_, *clock_, impl_->rng_mu, impl_->rng, observer_.load(), req)

Result<Json> RestClient::get(const ResourceKind& kind, std::string_view ns, std::string_view name,
                             const GetOptions& options) {
  HttpRequest r{"GET", kind.path(ns, name), "", "", "application/json", describe("get", kind, ns, name)};
  if (options.metadata_only) {
    r.accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
  }
  return parse_body(INFERGATE_SEND(r), r.what);
}

Result<ObjectList> RestClient::list(const ResourceKind& kind, std::string_view ns,
                                    const ListOptions& options) {
  std::string q;
  add_param(q, "labelSelector", options.label_selector);
  add_param(q, "fieldSelector", options.field_selector);
  if (options.limit > 0) add_param(q, "limit", std::to_string(options.limit));
  add_param(q, "continue", options.continue_token);
  add_param(q, "resourceVersion", options.resource_version);
  HttpRequest r{"GET", kind.path(ns) + q, "", "", "application/json", describe("list", kind, ns, "")};
  INFERGATE_ASSIGN_OR_RETURN(Json body, parse_body(INFERGATE_SEND(r), r.what));
  ObjectList out;
  auto items = body.find("items");
  if (items == body.end() || !(items->is_array() || items->is_null())) {
    return Error(ErrorCode::kDataLoss, r.what + ": the list has no items array", "MalformedResponse");
  }
  if (items->is_array()) out.items = std::move(items->get_ref<Json::array_t&>());
  if (auto m = body.find("metadata"); m != body.end() && m->is_object()) {
    out.resource_version = m->value("resourceVersion", "");
    out.continue_token = m->value("continue", "");
  }
  return out;
}

Result<std::unique_ptr<WatchStream>> RestClient::watch(const ResourceKind& kind, std::string_view ns,
                                                       const WatchOptions& options) {
  std::string q = "?watch=true";
  add_param(q, "resourceVersion", options.resource_version);
  add_param(q, "labelSelector", options.label_selector);
  add_param(q, "fieldSelector", options.field_selector);
  if (options.allow_bookmarks) add_param(q, "allowWatchBookmarks", "true");
  add_param(q, "timeoutSeconds", std::to_string(std::max<int64_t>(1, options.timeout.count())));
  std::string what = describe("watch", kind, ns, "");
  try {
    // A client of its own: the timeout is an inactivity limit, longer than the server's stream
    // timeout, so only a stream that went silent (no events, no bookmarks) is cut on our side.
    http_client_config cfg = impl_->base_config;
    cfg.set_timeout(
        std::chrono::duration_cast<std::chrono::microseconds>(options.timeout + std::chrono::seconds(60)));
    auto client = std::make_unique<http_client>(utility::conversions::to_string_t(config_.server), cfg);
    http::http_request req(http::methods::GET);
    req.set_request_uri(utility::conversions::to_string_t(kind.path(ns) + q));
    req.headers().add(U("Accept"), U("application/json"));
    req.headers().add(U("User-Agent"), utility::conversions::to_string_t(config_.user_agent));
    if (config_.token) {
      auto token = config_.token->token();
      if (!token.ok()) return std::move(token).error().context(what);
      if (!token->empty())
        req.headers().add(U("Authorization"), utility::conversions::to_string_t("Bearer " + *token));
    }
    pplx::cancellation_token_source cts;
    auto start = std::chrono::steady_clock::now();
    http::http_response resp = client->request(req, cts.get_token()).get();
    if (auto* obs = observer_.load())
      obs->on_request("WATCH", resp.status_code(), std::chrono::steady_clock::now() - start);
    if (resp.status_code() != 200) {
      std::string body = resp.extract_utf8string(true).get();
      return api_error(resp.status_code(), body, what);
    }
    return std::unique_ptr<WatchStream>(
        std::make_unique<RestWatchStream>(std::move(client), std::move(cts), std::move(resp), what));
  } catch (const std::exception& e) {
    return transport_error(e, what);
  }
}

Result<Json> RestClient::create(const ResourceKind& kind, const Json& object) {
  std::string ns = object_namespace(object);
  HttpRequest r{"POST",
                kind.path(ns),
                dump_json(object),
                "application/json",
                "application/json",
                describe("create", kind, ns, object_name(object))};
  return parse_body(INFERGATE_SEND(r), r.what);
}

Result<Json> RestClient::update(const ResourceKind& kind, const Json& object) {
  std::string ns = object_namespace(object), name = object_name(object);
  HttpRequest r{"PUT",
                kind.path(ns, name),
                dump_json(object),
                "application/json",
                "application/json",
                describe("update", kind, ns, name)};
  return parse_body(INFERGATE_SEND(r), r.what);
}

Result<Json> RestClient::update_status(const ResourceKind& kind, const Json& object) {
  std::string ns = object_namespace(object), name = object_name(object);
  HttpRequest r{"PUT",
                kind.path(ns, name, "status"),
                dump_json(object),
                "application/json",
                "application/json",
                describe("update status of", kind, ns, name)};
  return parse_body(INFERGATE_SEND(r), r.what);
}

Result<Json> RestClient::patch(const ResourceKind& kind, std::string_view ns, std::string_view name,
                               PatchType type, const Json& patch, const PatchOptions& options) {
  std::string q;
  add_param(q, "fieldManager", options.field_manager);
  std::string ct;
  switch (type) {
    case PatchType::kMerge: ct = "application/merge-patch+json"; break;
    case PatchType::kJsonPatch: ct = "application/json-patch+json"; break;
    case PatchType::kApply:
      if (options.field_manager.empty()) return invalid_argument("server-side apply needs a field manager");
      ct = "application/apply-patch+yaml";  // JSON is YAML
      if (options.force) add_param(q, "force", "true");
      break;
  }
  HttpRequest r{"PATCH",
                kind.path(ns, name, options.subresource) + q,
                dump_json(patch),
                ct,
                "application/json",
                describe(type == PatchType::kApply ? "apply" : "patch", kind, ns, name)};
  return parse_body(INFERGATE_SEND(r), r.what);
}

Status RestClient::remove(const ResourceKind& kind, std::string_view ns, std::string_view name,
                          const DeleteOptions& options) {
  Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  if (!options.precondition_uid.empty()) body["preconditions"] = {{"uid", options.precondition_uid}};
  HttpRequest r{"DELETE",           kind.path(ns, name), dump_json(body),
                "application/json", "application/json",  describe("delete", kind, ns, name)};
  auto res = INFERGATE_SEND(r);
  if (!res.ok()) return res.error();
  return ok_status();
}

Result<Json> RestClient::get_path(std::string_view path) {
  HttpRequest r{"GET", std::string(path), "", "", "application/json", "get " + std::string(path)};
  return parse_body(INFERGATE_SEND(r), r.what);
}

#undef INFERGATE_SEND

}  // namespace infergate::op::client
