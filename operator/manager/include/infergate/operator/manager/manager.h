// The manager (controller-runtime's pkg/manager): wires the informer cache, the controllers, leader
// election, the health probes (/healthz, /readyz) and the metrics endpoint (/metrics), and runs them
// until stopped or until this replica loses its lease.
//
// Guarantees: informers run (and caches stay warm) whether or not this replica leads; controllers'
// workers run only while it leads; writes through write_client() are fenced by the lease; losing the
// lease stops the workers and makes run() return the error LeaderElectionLost (the binary then exits,
// and its restart campaigns again); a clean stop releases the lease for a fast hand-over.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/cache/informer_cache.h"
#include "infergate/operator/manager/controller.h"
#include "infergate/operator/manager/http_endpoints.h"
#include "infergate/operator/manager/leader_election.h"
#include "infergate/operator/manager/leader_guard.h"
#include "infergate/operator/manager/metrics.h"

namespace infergate::op::manager {

struct ManagerOptions {
  bool leader_elect = false;
  LeaderElectionConfig election;
  std::string metrics_bind_address = ":8080";       // "0" disables
  std::string health_probe_bind_address = ":8081";  // "0" disables
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
};

}  // namespace infergate::op::manager
