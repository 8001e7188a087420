// LocalPlatform: the Platform of one machine, with no cluster. A workload is a set of local
// processes ("pods"), each started as `infergate-agent exec <the verify flags> -- <the engine>`, so the
// release is verified in the pod's start path exactly as the init container does it in a cluster, and
// the runtime serves on a loopback port of its own. An endpoint is a local router listener; a job is
// one process that runs once. The reconciler, the rollout stages and the gates see the same contract
// as on Kubernetes.
//
// Where things are (the Layout the adapters render paths with):
//   artifact volume  persistentVolumeClaim X  ->  <volumes>/X   (NFS volumes are refused locally)
//   trust Secret S                            ->  <keys>/S/*.pem
//   termination log of a pod or job           ->  <state>/pods/<pod>/termination-log, <state>/jobs/<job>/...
//   logs                                      ->  <state>/pods/<pod>/log, <state>/jobs/<job>/log
//
// Guarantees:
//  - workloads, endpoints and jobs are kept under <state>/platform/ (written atomically), so an
//    operator restarted on the same state directory finds what it created (as an operator finds its
//    Deployments after a restart) and starts their pods again; it never creates a second canary;
//  - a workload updated to a new template is rolled like a Deployment with maxSurge 1 and
//    maxUnavailable 0: a new pod first, an old one removed only when the new one is ready;
//  - pods that exit are restarted with backoff (CrashLoopBackOff); a failed verification is visible
//    in the pod's VerifyState while it retries, as Kubernetes keeps an init container's last state;
//  - readiness is the engine's readiness path answering 200 (probed every probe_period);
//  - shutdown() stops every process (SIGTERM, SIGKILL after the grace period) and every listener.
// Thread-safe.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/local/router.h"
#include "infergate/operator/local/supervisor.h"
#include "infergate/operator/platform/platform.h"

namespace infergate::op::local {

struct LocalOptions {
  std::filesystem::path state_dir;    // pods, jobs, logs, records
  std::filesystem::path volumes_dir;  // persistentVolumeClaim X -> volumes_dir/X
  std::filesystem::path keys_dir;     // trust Secret S -> keys_dir/S/*.pem
  // Where infergate-agent and infergate-runtime are; empty: the directory of this executable, then PATH.
  std::filesystem::path bin_dir;
  std::string host = "127.0.0.1";  // pods and endpoint listeners bind here
  BackoffPolicy backoff;
  std::chrono::milliseconds grace{10000};
  std::chrono::milliseconds probe_period{500};
  std::chrono::milliseconds probe_timeout{2000};
  // Extra environment for every pod and job (tests slow a canary down this way).
  std::map<std::string, std::string> env;
};

// Placeholders in the Layout, replaced per process.
inline constexpr std::string_view kModelRootToken = "@volume@";
inline constexpr std::string_view kTrustDirToken = "@trust@";
inline constexpr std::string_view kTerminationLogToken = "@termination-log@";

// One row of `infergate-operator local get pods`.
struct PodRow {
  std::string model;  // namespace/name
  std::string name;
  std::string workload;
  std::string track;
  std::string revision;
  std::string status;  // Running, Verifying, Init:CrashLoopBackOff, CrashLoopBackOff, Terminating, ...
  bool ready = false;
  int restarts = 0;
  int pid = 0;
  std::string address;
  std::string log;
  WallTime started{};
};

class LocalPlatform final : public platform::Platform {
 public:
  static Result<std::unique_ptr<LocalPlatform>> create(LocalOptions options,
                                                       Clock& clock = SystemClock::instance());
  ~LocalPlatform() override;

  // Called (from the platform's threads) with a model's key when something about its pods changed:
  // a process started or exited, a pod became ready or not. The run loop enqueues a reconcile.
  void set_notify(std::function<void(const std::string& model_key)> fn);
  // The model keys that own something on this platform (restored records included).
  std::vector<std::string> model_keys() const;
  // Stops every pod and job and closes every listener. Idempotent.
  void shutdown();
  // Everything for `local get pods`.
  std::vector<PodRow> pods() const;
  // The endpoint listeners' URLs by endpoint name.
  std::map<std::string, std::string> endpoint_urls() const;
  // Ready pod addresses behind an endpoint (what the router offers); nullopt when no such endpoint.
  std::optional<std::vector<std::string>> resolve(const std::string& endpoint) const;
  // Endpoint names that are model names (the router's front door lists them).
  std::vector<std::string> model_endpoints() const;

  // Platform.
  std::string_view name() const override { return "local"; }
  api::Layout layout() const override;
  Result<platform::WorkloadState> observe_workload(const platform::ModelRef& model,
                                                   const std::string& workload) override;
  Result<platform::EndpointState> observe_endpoint(const platform::ModelRef& model,
                                                   const std::string& endpoint) override;
  Result<std::vector<std::string>> list_workloads(const platform::ModelRef& model) override;
  Result<platform::TrustState> check_trust(const platform::ModelRef& model,
                                           const api::TrustSpec& trust) override;
  Status apply_workload(const platform::ModelRef& model, const platform::WorkloadSpec& spec) override;
  Status scale_workload(const platform::ModelRef& model, const std::string& workload,
                        int32_t replicas) override;
  Status delete_workload(const platform::ModelRef& model, const std::string& workload) override;
  Status apply_endpoint(const platform::ModelRef& model, const platform::EndpointSpec& spec) override;
  // Local processes have no voluntary disruptions (no node drains): unsupported, never applied.
  Result<platform::DisruptionBudgetState> observe_disruption_budget(const platform::ModelRef& model,
                                                                    const std::string& name) override;
  Status apply_disruption_budget(const platform::ModelRef& model,
                                 const platform::DisruptionBudgetSpec& spec) override;
  Status cleanup(const platform::ModelRef& model) override;
  Status apply_job(const platform::ModelRef& model, const platform::JobSpec& spec) override;
  Result<platform::JobState> observe_job(const platform::ModelRef& model, const std::string& job) override;
  Status delete_job(const platform::ModelRef& model, const std::string& job) override;
  std::string pod_url(const platform::ModelRef& model, const platform::PodState& pod) override;
  Result<platform::HttpResponse> http_get(const platform::ModelRef& model, const std::string& url,
                                          std::chrono::milliseconds timeout) override;

  // The argv a pod runs: `<bin>/infergate-agent exec <verify flags> -- <bin>/<engine> <args>`, with the
  // layout's placeholders replaced for this pod and the engine's port set to 0 (the runtime prints
  // the port it bound). Public for tests.
  Result<std::vector<std::string>> pod_command(const platform::WorkloadSpec& spec,
                                               const std::filesystem::path& pod_dir) const;

 private:
  struct Pod {
    std::string name;
    std::string template_hash;
    std::string revision;
    std::filesystem::path dir;
    std::string address;
    bool ready = false;
    bool deleting = false;
    bool started = false;      // the supervisor knows it
    std::string last_verdict;  // the agent's verdict from an earlier attempt (kept while it retries)
    int last_verdict_exit = 0;
    int seen_starts = 0;
  };
  struct Workload {
    platform::ModelRef model;
    platform::WorkloadSpec spec;
    std::string template_hash;
    int32_t replicas = 0;
    std::map<std::string, Pod> pods;  // by name
    int next_index = 0;
  };
  struct Endpoint {
    platform::ModelRef model;
    platform::EndpointSpec spec;
    std::string hash;
    int port = 0;
    std::unique_ptr<Router> listener;
  };
  struct Job {
    platform::ModelRef model;
    platform::JobSpec spec;
    std::string hash;
    std::filesystem::path dir;
    std::optional<platform::JobState> final_state;  // once it ended (kept in the record)
  };

  LocalPlatform(LocalOptions options, Clock& clock);
  Status restore();
  void probe_loop();
  void reconcile_workloads();  // pods towards each workload's spec (the Deployment controller's part)
  void reconcile_workload(const std::string& key, Workload& w, std::vector<std::string>& notify);
  Status start_pod(Workload& w, Pod& p);
  platform::PodState pod_state(const Workload& w, const Pod& p, const std::optional<ProcessStatus>& ps) const;
  Status save_workload(const Workload& w) const;
  Status save_endpoint(const Endpoint& e) const;
  Status save_job(const Job& j) const;
  Status start_listener(Endpoint& e);
  std::filesystem::path binary(const std::string& name) const;
  std::string model_dir_key(const platform::ModelRef& m) const;
  void notify(const std::string& model_key);

  LocalOptions options_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, Workload> workloads_;  // by "<model key>/<workload>"
  std::map<std::string, Endpoint> endpoints_;  // by endpoint name (names are unique per model namespace)
  std::map<std::string, Job> jobs_;            // by "<model key>/<job>"
  std::unique_ptr<ProcessSupervisor> supervisor_;
  std::function<void(const std::string&)> notify_;
  std::mutex notify_mu_;
  bool stopping_ = false;
  std::thread prober_;
  std::condition_variable cv_;
};

// `infergate-operator local` writes events as log lines and appends them to <state>/events.log.
class LocalEventSink final : public platform::EventSink {
 public:
  explicit LocalEventSink(std::filesystem::path file, Clock& clock = SystemClock::instance());
  void emit(const platform::ModelRef& model, const platform::EventRecord& event) override;
  // The latest events of one model, oldest first (for `local get -o describe`).
  std::vector<std::string> recent(const std::string& model_key, size_t n) const;

 private:
  std::filesystem::path file_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> recent_;
};

}  // namespace infergate::op::local
