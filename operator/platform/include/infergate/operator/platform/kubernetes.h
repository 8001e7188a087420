// The Kubernetes platform: a workload is a Deployment, an endpoint a Service, both owned by the
// InferenceModel (ownerReferences, so the garbage collector removes them with it); pods fit the
// "restricted" Pod Security Standard with a read-only root filesystem and a read-only artifact mount;
// verdicts come from the agent's termination message. Reads come from the informer cache, writes go
// to the API server (server-side apply, field manager "infergate-operator", forced: the operator
// owns these objects). Also: the ModelStore over the status subresource and the EventSink that writes
// core/v1 Events.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "infergate/common/clock.h"
#include "infergate/operator/cache/informer_cache.h"
#include "infergate/operator/client/client.h"
#include "infergate/operator/platform/platform.h"

namespace infergate::op::platform {

inline constexpr std::string_view kFieldManager = "infergate-operator";

// The store index the cache keeps for owned kinds: "<namespace>/<model label>".
inline constexpr std::string_view kModelIndex = "model";
std::vector<std::string> model_index_values(const Json& object);

// What the informer cache keeps of the objects the platform reads; the rest (pod templates, pod specs,
// managedFields) is dropped before storing, which is most of their size.
void trim_deployment(Json& deployment);  // metadata, spec.replicas, spec.selector, status
void trim_pod(Json& pod);                // metadata, status, each container's name and ports
void trim_owned(Json& object);           // metadata, spec.selector and ports (Services), status (Jobs)

// The pod's fixed layout: where the artifact, the keys and the verdict are.
api::Layout kubernetes_layout();

// The Deployment for a workload (pure: what apply_workload sends).
Json render_deployment(const ModelRef& model, const WorkloadSpec& spec);
// The Service for an endpoint.
Json render_service(const ModelRef& model, const EndpointSpec& spec);
// The PodDisruptionBudget (policy/v1) for a disruption budget: maxUnavailable of the stable pods, and
// unhealthyPodEvictionPolicy AlwaysAllow, so a pod that is not ready never holds up a node drain.
Json render_disruption_budget(const ModelRef& model, const DisruptionBudgetSpec& spec);
// A pod object as the platform-neutral PodState (the agent's init container is "verify", the serving
// container "runtime").
PodState pod_state(const Json& pod);
// The Job for a rollout check: one pod, no retries (backoffLimit 0), restartPolicy Never, killed after
// the deadline; its container "check" writes its JSON result to /dev/termination-log
// (terminationMessagePolicy File). Labels go on the Job and its pod (so the informers see both).
Json render_job(const ModelRef& model, const JobSpec& spec);
// A Job and its pods as a JobState.
JobState job_state(const Json& job, const std::vector<const Json*>& pods);
// A Deployment plus its pods as a WorkloadState.
WorkloadState workload_state(const Json& deployment, const std::vector<const Json*>& pods);

class KubernetesPlatform final : public Platform {
 public:
  // The cache must hold Deployments, Services, Pods, Jobs and PodDisruptionBudgets (the app sets that
  // up). Secrets are not
  // watched (no Secret reads beyond a metadata GET of the one named); a Secret found present is
  // trusted to exist for `trust_ttl` before it is looked up again, a missing one is looked up on
  // every check.
  KubernetesPlatform(client::Client& client, cache::InformerCache& cache,
                     Clock& clock = SystemClock::instance(),
                     std::chrono::nanoseconds trust_ttl = std::chrono::seconds(60));

  std::string_view name() const override { return "kubernetes"; }
  api::Layout layout() const override { return kubernetes_layout(); }
  Result<WorkloadState> observe_workload(const ModelRef& model, const std::string& workload) override;
  Result<EndpointState> observe_endpoint(const ModelRef& model, const std::string& endpoint) override;
  Result<std::vector<std::string>> list_workloads(const ModelRef& model) override;
  // A metadata-only GET of the Secret (never its data, never a list of Secrets).
  Result<TrustState> check_trust(const ModelRef& model, const api::TrustSpec& trust) override;
  Status apply_workload(const ModelRef& model, const WorkloadSpec& spec) override;
  Status scale_workload(const ModelRef& model, const std::string& workload, int32_t replicas) override;
  Status delete_workload(const ModelRef& model, const std::string& workload) override;
  Status apply_endpoint(const ModelRef& model, const EndpointSpec& spec) override;
  Result<DisruptionBudgetState> observe_disruption_budget(const ModelRef& model,
                                                          const std::string& name) override;
  Status apply_disruption_budget(const ModelRef& model, const DisruptionBudgetSpec& spec) override;
  Status cleanup(const ModelRef& model) override;
  Status apply_job(const ModelRef& model, const JobSpec& spec) override;
  Result<JobState> observe_job(const ModelRef& model, const std::string& job) override;
  Status delete_job(const ModelRef& model, const std::string& job) override;
  // Pods are reached directly on their IP and container port (the operator runs in the cluster).
  std::string pod_url(const ModelRef& model, const PodState& pod) override;
  Result<HttpResponse> http_get(const ModelRef& model, const std::string& url,
                                std::chrono::milliseconds timeout) override;

 private:
  client::Client& client_;
  cache::InformerCache& cache_;
  Clock& clock_;
  std::chrono::nanoseconds trust_ttl_;
  std::mutex trust_mu_;
  std::unordered_map<std::string, MonoTime> trust_seen_;  // "ns/secret" -> when it was last found
};

// InferenceModels from the cache; status through the status subresource. Reads see our own writes:
// until the cache catches up with a status we wrote, get() returns the object the server answered
// the write with (as long as the cache still shows the version we wrote over), which saves a 409 and
// a re-read for every reconcile that runs in between.
class KubernetesModelStore final : public ModelStore {
 public:
  KubernetesModelStore(client::Client& client, cache::InformerCache& cache)
      : client_(client), cache_(cache) {}
  Result<std::optional<Json>> get(const std::string& ns, const std::string& name) override;
  Result<std::optional<Json>> get_fresh(const std::string& ns, const std::string& name) override;
  Result<Json> write_status(const Json& base, const Json& status) override;

 private:
  struct Written {
    std::string base_resource_version;  // what the cache held when we wrote
    Json object;                        // what the server stored
  };
  client::Client& client_;
  cache::InformerCache& cache_;
  std::mutex mu_;
  std::unordered_map<std::string, Written> written_;
};

// core/v1 Events about InferenceModels, written by a background thread. Repeats of the same event
// (object, type, reason, message) within ten minutes increment its count instead of adding events.
class KubernetesEventRecorder final : public EventSink {
 public:
  KubernetesEventRecorder(client::Writer& writer, Clock& clock, std::string instance);
  ~KubernetesEventRecorder() override;
  void emit(const ModelRef& model, const EventRecord& event) override;
  // Waits until every queued event has been written (tests, shutdown).
  void flush();
  size_t written() const;

 private:
  struct Item {
    ModelRef model;
    EventRecord event;
    WallTime at;
  };
  struct Seen {
    std::string name;
    int count;
    WallTime last;
  };
  void run();
  void write(const Item& item);

  client::Writer& writer_;
  Clock& clock_;
  std::string instance_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Item> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  size_t written_ = 0;
  uint64_t counter_ = 0;
  std::unordered_map<std::string, Seen> seen_;
  std::thread thread_;
};

}  // namespace infergate::op::platform
