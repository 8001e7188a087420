// RestClient: the Kubernetes API over HTTP(S), on the project's HTTP client (infergate/http/client.h,
// cpprestsdk underneath); callers see Result, Json and the Client interface only.
//
// Guarantees:
//  - every request has a timeout (RestConfig::timeout; watches: their timeoutSeconds plus a margin,
//    counted as inactivity, so bookmarks keep a quiet watch alive);
//  - 429 is retried after Retry-After (capped), 5xx, timeouts and broken connections are retried with
//    exponential backoff and jitter, up to RetryPolicy::max_attempts tries in all; other errors are
//    returned at once with the API's reason word;
//  - watch streams are read line by line as they arrive.
// Caveats: a retried POST whose first attempt reached the server comes back as AlreadyExists;
// callers treat that as success where it is. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>

#include "infergate/common/clock.h"
#include "infergate/operator/client/client.h"
#include "infergate/operator/client/config.h"

namespace infergate::op::client {

struct RetryPolicy {
  int max_attempts = 5;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};
  double jitter = 0.5;                       // each delay is stretched by a random factor in [1, 1 + jitter]
  std::chrono::seconds max_retry_after{60};  // a longer Retry-After is capped to this
};

// The delay before retry number `attempt` (1-based): initial * 2^(attempt-1), capped, with jitter.
std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int attempt, std::mt19937_64& rng);

// Counts what the client did, for metrics (label: verb and HTTP code).
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void on_request(std::string_view verb, int http_status, std::chrono::nanoseconds latency) = 0;
};

class RestClient final : public Client {
 public:
  static Result<std::unique_ptr<RestClient>> create(RestConfig config, RetryPolicy retry = {},
                                                    Clock* clock = nullptr);
  ~RestClient() override;

  Result<Json> get(const ResourceKind& kind, std::string_view ns, std::string_view name,
                   const GetOptions& options = {}) override;
  Result<ObjectList> list(const ResourceKind& kind, std::string_view ns, const ListOptions& options) override;
  Result<std::unique_ptr<WatchStream>> watch(const ResourceKind& kind, std::string_view ns,
                                             const WatchOptions& options) override;
  Result<Json> create(const ResourceKind& kind, const Json& object) override;
  Result<Json> update(const ResourceKind& kind, const Json& object) override;
  Result<Json> update_status(const ResourceKind& kind, const Json& object) override;
  Result<Json> patch(const ResourceKind& kind, std::string_view ns, std::string_view name, PatchType type,
                     const Json& patch, const PatchOptions& options = {}) override;
  Status remove(const ResourceKind& kind, std::string_view ns, std::string_view name,
                const DeleteOptions& options = {}) override;

  // Raw GET of a path (discovery, /version): the body as JSON.
  Result<Json> get_path(std::string_view path);

  void set_observer(RequestObserver* observer) { observer_ = observer; }
  const RestConfig& config() const { return config_; }

  struct Impl;

 private:
  explicit RestClient(RestConfig config, RetryPolicy retry, Clock* clock);
  RestConfig config_;
  RetryPolicy retry_;
  Clock* clock_;
  std::atomic<RequestObserver*> observer_{nullptr};
  std::unique_ptr<Impl> impl_;
};

}  // namespace infergate::op::client
