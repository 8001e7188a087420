// RestClient over the project's HTTP client (infergate_http_client, a facade over cpprestsdk): the
// transport's errors arrive as Result; here they gain the Kubernetes request they belong to.
#include "infergate/operator/client/rest_client.h"

#include "infergate/common/log.h"
#include "infergate/http/client.h"

namespace infergate::op::client {
namespace {

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

// API responses larger than this are refused (a list is paginated long before).
constexpr uint64_t kMaxResponseBytes = 256u << 20;

// A transport error, told as the Kubernetes request it belongs to.
Error transport_error(const Error& e, std::string_view what) {
  if (e.reason() == "BodyTooLarge") {
    return Error(ErrorCode::kDataLoss, std::string(what) + ": " + e.message(), "MalformedResponse");
  }
  std::string message = e.message();
  if (e.code() == ErrorCode::kDeadlineExceeded) message = "timed out";
  if (e.code() == ErrorCode::kCancelled) message = "cancelled";
  return Error(e.code(), std::string(what) + ": " + message, e.reason());
}

// The request headers every call carries: Accept and, when there is one, the bearer token.
Result<http::Headers> request_headers(const RestConfig& config, const std::string& accept,
                                      std::string_view what) {
  http::Headers h{{"Accept", accept}};
  if (config.token) {
    auto token = config.token->token();
    if (!token.ok()) return std::move(token).error().context(what);
    if (!token->empty()) h.emplace_back("Authorization", "Bearer " + *token);
  }
  return h;
}

constexpr size_t kMaxWatchLine = 16u << 20;

// One open watch: the response body read as it arrives and split into lines.
class RestWatchStream final : public WatchStream {
 public:
  RestWatchStream(std::unique_ptr<http::ResponseStream> body, std::string what)
      : body_(std::move(body)), what_(std::move(what)) {}

  Result<std::optional<WatchEvent>> next() override {
    for (;;) {
      if (cancelled_) return Error(ErrorCode::kCancelled, what_ + ": cancelled", "Cancelled");
      size_t nl = pending_.find('\n');
      if (nl == std::string::npos) {
        auto piece = body_->read();
        if (!piece.ok()) {
          if (cancelled_) return Error(ErrorCode::kCancelled, what_ + ": cancelled", "Cancelled");
          return transport_error(piece.error(), what_ + ": stream broke");
        }
        if (!*piece) return std::optional<WatchEvent>();  // the server ended the watch cleanly
        pending_ += **piece;
        if (pending_.size() > kMaxWatchLine) {
          return Error(ErrorCode::kDataLoss, what_ + ": a watch event longer than 16 MiB",
                       "MalformedWatchEvent");
        }
        continue;
      }
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
      if (line.empty()) continue;
      return parse_event(line);
    }
  }

  void cancel() override {
    if (!cancelled_.exchange(true)) body_->cancel();
  }

 private:
  Result<std::optional<WatchEvent>> parse_event(const std::string& line) {
    auto j = parse_json(line, "watch event");
    if (!j.ok() || !j->is_object()) {
      return Error(ErrorCode::kDataLoss, what_ + ": malformed watch event", "MalformedWatchEvent");
    }
    auto t = j->find("type");
    std::string type = t != j->end() && t->is_string() ? t->get<std::string>() : "";
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
      return Error(ErrorCode::kDataLoss, what_ + ": unknown watch event type \"" + type.substr(0, 32) + "\"",
                   "MalformedWatchEvent");
    }
    auto obj = j->find("object");
    if (obj == j->end() || !obj->is_object()) {
      return Error(ErrorCode::kDataLoss, what_ + ": watch event without an object", "MalformedWatchEvent");
    }
    ev.object = std::move(*obj);
    return std::optional<WatchEvent>(std::move(ev));
  }

  std::unique_ptr<http::ResponseStream> body_;
  std::string what_;
  std::string pending_;  // received bytes not yet returned as events
  std::atomic<bool> cancelled_{false};
};

}  // namespace

std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int attempt, std::mt19937_64& rng) {
  double base = static_cast<double>(p.initial_backoff.count());
  for (int i = 1; i < attempt && base < static_cast<double>(p.max_backoff.count()); ++i) base *= 2;
  base = std::min(base, static_cast<double>(p.max_backoff.count()));
  std::uniform_real_distribution<double> dist(1.0, 1.0 + std::max(0.0, p.jitter));
  return std::chrono::milliseconds(static_cast<int64_t>(base * dist(rng)));
}

struct RestClient::Impl {
  std::unique_ptr<http::Client> http;
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
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return invalid_argument("API server URL \"" + config.server + "\" is not http(s)");
  }
  if (retry.max_attempts < 1) retry.max_attempts = 1;
  http::ClientOptions o;
  o.base_url = config.server;
  o.timeout = config.timeout;
  o.user_agent = config.user_agent;
  o.tls = http::ClientTls{config.ca_pem, config.client_cert_pem, config.client_key_pem,
                          config.insecure_skip_tls_verify};
  auto transport = http::Client::create(std::move(o));
  if (!transport.ok()) {
    Error e = std::move(transport).error();
    return Error(ErrorCode::kInvalidArgument, "API server \"" + config.server + "\": " + e.message(),
                 e.reason());
  }
  std::unique_ptr<RestClient> c(new RestClient(std::move(config), retry, clock));
  c->impl_->http = std::move(*transport);
  return c;
}

namespace {

// One attempt, no retries.
Result<HttpResponse> send_once(http::Client& client, const RestConfig& config, const HttpRequest& r) {
  http::ClientRequest req;
  req.method = r.method;
  req.target = r.path_and_query;
  INFERGATE_ASSIGN_OR_RETURN(req.headers, request_headers(config, r.accept, r.what));
  req.body = r.body;
  req.content_type = r.content_type;
  req.max_body = kMaxResponseBytes;
  auto resp = client.call(req);
  if (!resp.ok()) return transport_error(resp.error(), r.what);
  return HttpResponse{resp->status, std::move(resp->body), resp->header("retry-after")};
}

}  // namespace

namespace {

// Sends with retries; returns the body of a 2xx response or the classified error.
Result<std::string> send(http::Client& client, const RestConfig& config, const RetryPolicy& retry,
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
  send(*impl_->http, config_, retry_, *clock_, impl_->rng_mu, impl_->rng, observer_.load(), req)

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
  // The deadline outlasts the server's own end of the stream (timeoutSeconds), so only a stream that
  // went silent past it (no events, no bookmarks) is cut on our side.
  http::ClientRequest req;
  req.target = kind.path(ns) + q;
  INFERGATE_ASSIGN_OR_RETURN(req.headers, request_headers(config_, "application/json", what));
  req.timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout + std::chrono::seconds(60));
  auto start = std::chrono::steady_clock::now();
  auto opened = impl_->http->open(req);
  if (!opened.ok()) return transport_error(opened.error(), what);
  std::unique_ptr<http::ResponseStream> body = std::move(*opened);
  if (auto* obs = observer_.load())
    obs->on_request("WATCH", body->status(), std::chrono::steady_clock::now() - start);
  if (body->status() != 200) {
    auto text = body->read_all(1u << 20);
    return api_error(body->status(), text.ok() ? *text : std::string(), what);
  }
  return std::unique_ptr<WatchStream>(std::make_unique<RestWatchStream>(std::move(body), what));
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
