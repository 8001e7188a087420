// Where models run. The reconciler (and the rollout state machine built on it) speaks only this
// interface: create, update, scale and delete a workload described in platform-neutral terms, read
// its pods' states and the agent's verdicts, reach its endpoints, check the trust keys exist, and
// record events and status. KubernetesPlatform (Deployments, Services, core Events, the status
// subresource) implements it today; a LocalPlatform (pods as local processes, status files) can
// implement the same contract without the reconciler changing.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::platform {

// The model that owns workloads: children carry its identity (ownerReferences, labels, directories).
struct ModelRef {
  std::string namespace_;
  std::string name;
  std::string uid;
  std::string key() const { return namespace_.empty() ? name : namespace_ + "/" + name; }
};

// One workload: N identical pods that first verify the artifact (the agent), then serve it (the
// engine). Everything a platform needs to run it, nothing about how.
struct WorkloadSpec {
  std::string name;  // deterministic: api::workload_name(model, track)
  api::Track track = api::Track::kStable;
  std::string revision;  // api::revision of the pod configuration
  int32_t replicas = 1;
  std::map<std::string, std::string> labels;  // on the workload and on every pod
  api::ContainerCommand verify;               // the init step: infergate-agent verify ...
  std::string trust_secret;                   // where the trusted public keys come from
  api::EngineCommand engine;                  // the serving process
  api::ArtifactSpec artifact;                 // mounted read-only
  api::Resources resources;
  api::SchedulingSpec scheduling;
  std::string summary;  // "int8/int8 ctx=32768 x16", for people
  // How a change of the pod template rolls: true adds a new pod before an old one goes (never below
  // `replicas` serving, one pod's resources on top); false removes an old pod first (never more pods
  // than `replicas`: what a GPU pool without spare room needs). Not part of template_hash: changing it
  // rolls no pod.
  bool surge = true;

  // SHA-256 prefix over everything that defines the pods (not replicas): equal hashes, nothing to
  // roll out. Platforms store it with the workload and report it back in WorkloadState.
  std::string template_hash() const;
};

// The stable address in front of a model's ready pods (a Service, or a local router).
struct EndpointSpec {
  std::string name;
  std::map<std::string, std::string> selector;  // which pods' labels it routes to
  std::map<std::string, std::string> labels;
  int port = 80;
  std::string hash() const;
};

struct EndpointState {
  bool exists = false;
  std::string hash;
  std::string url;  // how clients reach it
};

// How many of the model's stable pods voluntary disruptions (node drains, cluster upgrades) may take
// at once: a PodDisruptionBudget on Kubernetes. Owned by the model, gone with it.
struct DisruptionBudgetSpec {
  std::string name;                             // the model's name
  std::map<std::string, std::string> selector;  // the stable pods
  std::map<std::string, std::string> labels;
  int32_t max_unavailable = 1;
  std::string hash() const;
};

struct DisruptionBudgetState {
  // false: the platform has no voluntary disruptions to budget (local processes); nothing is applied.
  bool supported = true;
  bool exists = false;
  std::string hash;
};

// The agent's init step in one pod.
struct VerifyState {
  enum class Phase { kNotStarted, kRunning, kSucceeded, kFailed };
  Phase phase = Phase::kNotStarted;
  int exit_code = 0;
  std::string termination_message;  // the agent's JSON line, as the platform recorded it
  int restarts = 0;
  std::string waiting_reason;  // e.g. ImagePullBackOff for the agent image
  std::string waiting_message;
};

struct PodState {
  std::string name;
  std::string revision;
  enum class Phase { kPending, kRunning, kSucceeded, kFailed, kUnknown };
  Phase phase = Phase::kPending;
  bool ready = false;
  bool deleting = false;
  VerifyState verify;
  std::string waiting_reason;           // the serving container's (CrashLoopBackOff, ImagePullBackOff, ...)
  std::string message;                  // detail for the waiting reason, or the last termination message
  int restarts = 0;                     // of the serving container, over the pod's lifetime
  std::string last_termination_reason;  // how the serving container last ended: Error, OOMKilled, ...
  int last_exit_code = 0;
  // When the pod started (status.startTime) and when the serving container last ended
  // (lastState.terminated.finishedAt); nullopt where the platform does not say.
  std::optional<WallTime> started_at;
  std::optional<WallTime> last_terminated_at;
  // Restarts of the serving container within the crash-loop window, counted across observations by
  // the reconciler (controllers/restart_history.h); platforms leave it 0.
  int recent_restarts = 0;
  // No node has room or matches (PodScheduled=False, Unschedulable), with the scheduler's message.
  bool unschedulable = false;
  std::string schedule_message;
  std::string address;  // where the pod serves ("10.1.2.3:8000"), when known
};

struct WorkloadState {
  bool exists = false;
  std::string template_hash;
  std::string revision;
  int32_t replicas = 0;  // desired, as the platform holds it
  int32_t updated_replicas = 0;
  int32_t ready_replicas = 0;
  int32_t available_replicas = 0;
  // The platform has acted on the latest spec (Deployment: observedGeneration caught up).
  bool observed_current = false;
  // The update strategy as the platform holds it (WorkloadSpec::surge); nullopt where the platform
  // has no such notion (local processes), so it never asks for an apply.
  std::optional<bool> surge;
  // The platform could not create a pod (Deployment ReplicaFailure: FailedCreate, from admission,
  // quota or a LimitRange), with its message; "" when it could.
  std::string failure_reason;
  std::string failure_message;
  std::vector<PodState> pods;
};

// Whether the trust-key Secret a model names exists. kForbidden: the operator may not read it (its
// RBAC lacks `get` on Secrets in that namespace), which waiting does not fix.
enum class TrustState { kPresent, kMissing, kForbidden };

// A run-to-completion task next to a model: the rollout's quality check (`infergate-runtime eval`
// against the stable and canary endpoints). One pod, never retried by the platform (a failed check is
// the rollout's to judge), killed after `deadline_seconds`.
struct JobSpec {
  std::string name;  // deterministic: "<model>-quality-<revision>"
  std::map<std::string, std::string> labels;
  api::ContainerCommand container;
  int64_t deadline_seconds = 1800;
  std::string hash() const;
};

// What became of a job. The result comes back through the container's termination message (at most
// 4096 bytes, the agent's and eval's JSON line), so no log access is needed.
struct JobState {
  bool exists = false;
  std::string hash;  // JobSpec::hash() of what was applied
  enum class Phase { kPending, kRunning, kSucceeded, kFailed };
  Phase phase = Phase::kPending;
  int exit_code = 0;                // of the check's container, once it terminated
  bool terminated = false;          // the container ran to an end (exit_code and message are real)
  std::string termination_message;  // what the container wrote at its termination-message path
  // Why it is stuck or failed, in the platform's words: ImagePullBackOff, DeadlineExceeded,
  // BackoffLimitExceeded, Error, OOMKilled, ...
  std::string reason;
  std::string message;
  // When the Job's Failed condition was set (its lastTransitionTime), where the platform says.
  std::optional<WallTime> failed_at;
};

// An HTTP answer from a pod or a monitoring server (the rollout reads /metrics and Prometheus' API).
struct HttpResponse {
  int status = 0;
  std::string body;
};
// The largest body Platform::http_get reads (a /metrics page or a Prometheus query result).
constexpr uint64_t kMaxScrapeBytes = 8u << 20;

struct EventRecord {
  enum class Type { kNormal, kWarning };
  Type type = Type::kNormal;
  std::string reason;  // CamelCase
  std::string message;
  bool operator==(const EventRecord&) const = default;
};

class Platform {
 public:
  virtual ~Platform() = default;
  virtual std::string_view name() const = 0;
  // Where models, keys and verdicts appear inside a pod or process (the adapters render paths with it).
  virtual api::Layout layout() const = 0;

  // Observations: cheap (from caches), never write.
  virtual Result<WorkloadState> observe_workload(const ModelRef& model, const std::string& workload) = 0;
  virtual Result<EndpointState> observe_endpoint(const ModelRef& model, const std::string& endpoint) = 0;
  // The names of the workloads this model owns (stable, canary, leftovers).
  virtual Result<std::vector<std::string>> list_workloads(const ModelRef& model) = 0;
  virtual Result<TrustState> check_trust(const ModelRef& model, const api::TrustSpec& trust) = 0;

  // Changes. Idempotent: applying the same spec twice is harmless, deleting what is gone succeeds.
  virtual Status apply_workload(const ModelRef& model, const WorkloadSpec& spec) = 0;
  virtual Status scale_workload(const ModelRef& model, const std::string& workload, int32_t replicas) = 0;
  virtual Status delete_workload(const ModelRef& model, const std::string& workload) = 0;
  virtual Status apply_endpoint(const ModelRef& model, const EndpointSpec& spec) = 0;
  // The stable pods' disruption budget (a PodDisruptionBudget): observed from the cache, applied
  // whole. A platform where it means nothing reports supported = false and is never asked to apply.
  virtual Result<DisruptionBudgetState> observe_disruption_budget(const ModelRef& model,
                                                                  const std::string& name) = 0;
  virtual Status apply_disruption_budget(const ModelRef& model, const DisruptionBudgetSpec& spec) = 0;
  // The model is gone: remove everything it owned.
  virtual Status cleanup(const ModelRef& model) = 0;

  // Rollout support.
  // Runs a job (idempotent by name: a job that exists is left as it is, whatever its spec).
  virtual Status apply_job(const ModelRef& model, const JobSpec& spec) = 0;
  virtual Result<JobState> observe_job(const ModelRef& model, const std::string& job) = 0;
  // Removes a job and its pod; deleting what is gone succeeds.
  virtual Status delete_job(const ModelRef& model, const std::string& job) = 0;
  // The URL a job or a client uses to reach an endpoint or a pod: "http://<address>".
  virtual std::string pod_url(const ModelRef& model, const PodState& pod) = 0;
  // GET `url` (a pod's /metrics, a Prometheus query) with a deadline. Transport failures are errors
  // (Unavailable, DeadlineExceeded); any HTTP status is a response. The body is capped at 8 MiB.
  virtual Result<HttpResponse> http_get(const ModelRef& model, const std::string& url,
                                        std::chrono::milliseconds timeout) = 0;
};

// Where users see what happened: Kubernetes Events, or log lines locally. Never blocks the
// reconciler on I/O; delivery is best effort (an event that cannot be written is logged).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(const ModelRef& model, const EventRecord& event) = 0;
};

// Where InferenceModels come from and their status goes: the API server (through the cache), or
// files on disk for the local platform.
class ModelStore {
 public:
  virtual ~ModelStore() = default;
  // The model as last observed (a cache read); nullopt when it no longer exists.
  virtual Result<std::optional<Json>> get(const std::string& namespace_, const std::string& name) = 0;
  // The model as the source of truth has it now (after a conflict).
  virtual Result<std::optional<Json>> get_fresh(const std::string& namespace_, const std::string& name) = 0;
  // Writes `status` with optimistic concurrency against `base`'s resourceVersion. Conflict (code
  // kConflict) when base is stale; NotFound when the model is gone. Returns the stored object.
  virtual Result<Json> write_status(const Json& base, const Json& status) = 0;
};

}  // namespace infergate::op::platform
