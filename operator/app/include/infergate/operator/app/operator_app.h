// infergate-operator as a library: flags, wiring (client, cache, platform, reconciler, manager) and a
// blocking run. main.cc only parses the command line and calls run_operator(); tests build an
// OperatorApp directly against the fake API server.
#pragma once

#include "infergate/operator/controllers/rollout_metrics.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/client/config.h"
#include "infergate/operator/client/rest_client.h"
#include "infergate/operator/controllers/inference_model_controller.h"
#include "infergate/operator/manager/manager.h"
#include "infergate/operator/platform/kubernetes.h"

namespace infergate::op::app {

struct OperatorOptions {
  std::string kubeconfig;  // "" = $KUBECONFIG, in-cluster, or ~/.kube/config
  std::string context;
  // Watch only these namespaces (empty = all): one informer per kind and namespace, so the operator
  // needs a Role in each, never a ClusterRole for workloads.
  std::vector<std::string> namespaces;
  // Refuse to start when the installed InferenceModel CRD lacks what this operator writes.
  bool check_crd = true;
  bool leader_elect = false;
  std::string leader_elect_namespace;  // "" = the client configuration's namespace
  std::string leader_elect_id = "infergate-operator-leader";
  std::string identity;  // "" = hostname plus a random suffix
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  std::string metrics_bind_address = ":8443";
  std::string health_probe_bind_address = ":8081";
  bool metrics_secure = true;              // TLS + TokenReview/SubjectAccessReview on /metrics
  std::filesystem::path metrics_cert_dir;  // tls.crt, tls.key; "" = self-signed at start
  int workers = 4;
  api::Images images;
  std::chrono::seconds resync_period{600};
  std::chrono::milliseconds api_timeout{30000};
  std::chrono::milliseconds trust_recheck{30000};  // how often a missing trust Secret is looked for again
};

// Adds the flags users know from controller-runtime operators (--kubeconfig, --namespace,
// --leader-elect, --metrics-bind-address, --health-probe-bind-address, --workers, ...).
void add_flags(CLI::App& app, OperatorOptions& options);

// The exit codes of the binary.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitLostLease = 3;

class OperatorApp {
 public:
  static Result<std::unique_ptr<OperatorApp>> create(const OperatorOptions& options,
                                                     client::RestConfig config,
                                                     Clock& clock = SystemClock::instance());
  ~OperatorApp();

  // Blocks until stop() or a lost lease (error reason LeaderElectionLost).
  Status run();
  void stop();

  manager::Manager& manager() { return *manager_; }
  manager::OperatorMetrics& metrics() { return metrics_; }
  controllers::InferenceModelReconciler& reconciler() { return *reconciler_; }
  platform::KubernetesEventRecorder& events() { return *events_; }
  const std::string& identity() const { return identity_; }

 private:
  OperatorApp() = default;
  std::string identity_;
  bool check_crd_ = true;
  manager::OperatorMetrics metrics_;
  std::unique_ptr<client::RestClient> client_;
  std::unique_ptr<manager::Manager> manager_;
  std::unique_ptr<platform::KubernetesPlatform> platform_;
  std::unique_ptr<platform::KubernetesModelStore> models_;
  std::unique_ptr<platform::KubernetesEventRecorder> events_;
  std::unique_ptr<controllers::CapacityChecker> capacity_;
  std::unique_ptr<controllers::RolloutMetrics> rollout_metrics_;
  std::unique_ptr<controllers::InferenceModelReconciler> reconciler_;
};

// What main() does: load the client configuration, build the app, run it, stop on SIGINT/SIGTERM.
int run_operator(const OperatorOptions& options);

// "host_1a2b3c4d": a replica identity unique enough for leader election.
std::string default_identity();

}  // namespace infergate::op::app
