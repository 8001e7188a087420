// The manager (controller-runtime's pkg/manager): wires the informer cache, the controllers, leader
// election, the health probes (/healthz, /readyz: plain HTTP, no authentication) and the metrics
// endpoint (/metrics: by default over TLS, for callers whose bearer token a TokenReview authenticates
// and a SubjectAccessReview allows to get /metrics, as controller-runtime's secure metrics serving
// does), and runs them until stopped or until this replica loses its lease.
//
// Guarantees: informers run (and caches stay warm) whether or not this replica leads; controllers'
// workers run only while it leads; writes through write_client() are fenced by the lease; losing the
// lease stops the workers and makes run() return the error LeaderElectionLost (the binary then exits,
// and its restart campaigns again); a clean stop releases the lease for a fast hand-over.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/cache/informer_cache.h"
#include "infergate/operator/manager/controller.h"
#include "infergate/operator/manager/http_endpoints.h"
#include "infergate/operator/manager/kubernetes_authorizer.h"
#include "infergate/operator/manager/leader_election.h"
#include "infergate/operator/manager/leader_guard.h"
#include "infergate/operator/manager/metrics.h"

namespace infergate::op::manager {

struct ManagerOptions {
  bool leader_elect = false;
  LeaderElectionConfig election;
  std::string metrics_bind_address = ":8443";       // "0" disables
  std::string health_probe_bind_address = ":8081";  // "0" disables
  // /metrics over TLS, each request's bearer token reviewed by the API server (TokenReview) and
  // authorised for "get" on the non-resource URL /metrics (SubjectAccessReview). Off: plain HTTP
  // without authentication (local use; keep it off any network others share).
  bool metrics_secure = true;
  // tls.crt and tls.key of the serving certificate (a mounted kubernetes.io/tls Secret; re-read when
  // they change, as cert-manager renews them). Empty: a self-signed certificate made at start.
  std::filesystem::path metrics_cert_dir;
  std::chrono::milliseconds metrics_auth_cache_ttl{10'000};
  std::chrono::milliseconds cache_sync_timeout{std::chrono::minutes(2)};
};

class Manager {
 public:
  // `api` is the unfenced client (the manager's informers and leader election use it).
  Manager(client::Client& api, ManagerOptions options, Clock& clock, OperatorMetrics& metrics);
  ~Manager();

  cache::InformerCache& cache() { return cache_; }
  // Writes through this client happen only while this replica leads (or always, without election).
  client::Client& write_client() { return guard_; }
  Controller& add_controller(reconcile::Reconciler& reconciler, ControllerOptions options);

  // Blocks. OK after stop(); LeaderElectionLost when the lease was lost; other errors at startup
  // (a port in use, caches that never sync).
  Status run();
  void stop();

  bool is_leader() const;
  bool ready() const;
  // The bound ports (0 when disabled or not started).
  int metrics_port() const { return metrics_port_.load(); }
  int health_port() const { return health_port_.load(); }

 private:
  void start_controllers();
  void stop_controllers();
  // The metrics endpoint as the options say: plain, or TLS with authentication and authorisation.
  Result<std::unique_ptr<HttpEndpoints>> start_metrics();
  // Re-reads the serving certificate when its files changed (cert-manager renewed it).
  void reload_metrics_certificate(HttpEndpoints& endpoints);

  client::Client& api_;
  ManagerOptions options_;
  Clock& clock_;
  OperatorMetrics& metrics_;
  cache::InformerCache cache_;
  std::unique_ptr<LeaderElector> elector_;
  LeaderGuard guard_;
  std::vector<std::unique_ptr<Controller>> controllers_;
  workqueue::StopSignal stop_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> leading_{false};
  std::atomic<bool> started_{false};
  std::atomic<int> metrics_port_{0}, health_port_{0};
  std::mutex controllers_mu_;
  std::unique_ptr<KubernetesAuthorizer> authorizer_;
  std::filesystem::file_time_type cert_mtime_{}, key_mtime_{};
};

}  // namespace infergate::op::manager
