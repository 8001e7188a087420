// The InferenceModel resource (serving.infergate.dev/v1alpha1) as C++ types, with strict parsing
// (defaults applied, every error naming its field path) and JSON for the status the operator writes.
// Platform-neutral: the same types are read from the Kubernetes API or from a YAML file on disk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/operator/api/enums.h"

namespace infergate::op::api {

inline constexpr std::string_view kGroup = "serving.infergate.dev";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kApiVersion = "serving.infergate.dev/v1alpha1";
inline constexpr std::string_view kKind = "InferenceModel";
inline constexpr std::string_view kPlural = "inferencemodels";
// Names are DNS-1035 labels short enough that every derived name (Service "<name>-canary", labels)
// stays within Kubernetes' 63-character limits.
inline constexpr size_t kMaxNameLength = 48;

struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::optional<WallTime> deletion_timestamp;
};

// Where the artifact volume comes from. Exactly one source; it is always mounted read-only.
struct VolumeSource {
  enum class Kind { kPersistentVolumeClaim, kNfs };
  Kind kind = Kind::kPersistentVolumeClaim;
  std::string claim_name;  // kPersistentVolumeClaim
  std::string nfs_server;  // kNfs
  std::string nfs_path;    // kNfs
};

// A keyless (Sigstore) signer an OMS bundle may name: its certificate's email or URI, and the OIDC
// issuer Fulcio recorded. Both are compared exactly.
struct TrustIdentity {
  std::string subject;
  std::string issuer;
};

struct TrustSpec {
  // A Secret mounted as a directory: PEM public keys (*.pem), and for OMS bundles also CA certificates
  // (*.pem/*.crt) and a Sigstore trusted_root.json.
  std::string public_key_secret;
  std::string expect_name;             // the model name the release statement must carry ("" = any)
  std::optional<int64_t> min_version;  // refuse releases older than this (rollback attacks)
  // The release formats the agent accepts: "infergate" (release.dsse.json) and/or "oms" (model.sig,
  // OpenSSF model signing v1.0). Empty: infergate only.
  std::vector<std::string> formats;
  std::vector<TrustIdentity> identities;  // keyless OMS signers; any one may have signed
  bool allows(std::string_view format) const {
    return formats.empty() ? format == "infergate"
                           : std::find(formats.begin(), formats.end(), format) != formats.end();
  }
};

struct ArtifactSpec {
  VolumeSource volume;
  std::string path;  // relative to the volume root, canonical ("glm-4-9b/r3")
  TrustSpec trust;
};

struct EngineSpec {
  EngineKind kind = EngineKind::kBundled;
  std::string image;              // "" = the operator's default for the bundled runtime
  std::vector<std::string> args;  // extra arguments appended after the managed ones
  std::string quantization;       // vllm/sglang: the method the artifact was exported with
  std::string model_file;         // llamacpp: the .gguf file inside the artifact directory
};

// The four knobs that are rolled out separately (DESIGN.md): they define what is served.
struct ServingConfig {
  WeightFormat weight_format = WeightFormat::kFp16;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFp16;
  int64_t max_context_length = 0;
  int64_t max_concurrency = 8;
  bool operator==(const ServingConfig&) const = default;
};

struct Resources {
  std::map<std::string, std::string> requests;  // quantities as written ("16Gi", "1")
  std::map<std::string, std::string> limits;
  // GPUs asked for: the largest integer value of a "<vendor>/gpu" or MIG slice
  // ("nvidia.com/mig-<profile>") limit or request (0 if none). A MIG slice is a GPU to the runtime
  // (the CUDA image), but one process can use only one, so it never means tensor parallelism.
  int64_t gpus() const;
  std::string gpu_resource_name() const;  // e.g. "nvidia.com/gpu"; "" when no GPU is requested
  bool mig() const;                       // the GPU asked for is a MIG slice
};

struct CanarySpec {
  int32_t replicas = 1;
  int64_t analysis_seconds = 600;
  bool surge = true;  // false: take the canary's capacity from stable instead of adding pods
  // A canary that is not verified and ready this long after its stage started fails the stage.
  int64_t progress_deadline_seconds = 1800;
};

struct QualityGateSpec {
  std::string suite = "default";
  std::optional<double> min_top1_agreement;
  std::optional<double> max_mean_kl;
  std::optional<double> max_perplexity_increase;  // relative: 0.02 = +2 %
  std::optional<double> min_retrieval_accuracy;
  std::optional<double> min_format_following;
  int64_t timeout_seconds = 1800;
};

struct PerformanceGateSpec {
  std::optional<double> max_ttft_p95_ratio;  // canary / stable
  std::optional<double> max_tpot_p95_ratio;
  std::optional<double> max_error_rate;  // absolute, 0..1
};

struct RolloutSpec {
  std::vector<StageName> stage_order{StageName::kWeights, StageName::kKvCache, StageName::kCapacity};
  CanarySpec canary;
  QualityGateSpec quality;
  PerformanceGateSpec performance;
  std::string prometheus_url;  // spec.rollout.analysis.prometheusURL; "" = scrape pods directly
  bool auto_rollback = true;
};

// Where and how the serving pods run, beyond what the engine and the artifact decide:
// spec.podTemplate (api/pod_template.h validates it), and the older spec.scheduling for the first
// three. None of it can replace what verification rests on: the agent's init container, the
// read-only model and trust mounts, the security contexts, the service-account token (never mounted).
struct SchedulingSpec {
  std::map<std::string, std::string> node_selector;
  Json tolerations = Json::array();  // passed through to the pod as written
  std::string runtime_class_name;
  Json affinity = Json::object();        // nodeAffinity / podAffinity / podAntiAffinity
  Json topology_spread = Json::array();  // topologySpreadConstraints
  std::string priority_class_name;
  std::string service_account_name;  // for image pulls and workload identity; no token is mounted
  std::vector<std::string> image_pull_secrets;
  Json env = Json::array();            // extra env of the serving container ({name, value|valueFrom})
  Json volumes = Json::array();        // extra volumes (restricted Pod Security types only)
  Json volume_mounts = Json::array();  // the serving container's mounts of those volumes
};

// What the capacity planner needs that the rest of the spec does not say: the GPU and the model's
// architecture (docs/capacity-planning.md, "In the operator"). Tensor parallelism is the GPU count
// of resources (what the engine adapters pass as their tensor-parallel size). Not part of the pod
// configuration: changing it re-plans, it rolls no pod.
struct CapacityPlanningSpec {
  std::string gpu;         // a planner catalogue name ("h200", "h100", "a100-80gb", ...), or
  std::string gpu_memory;  // usable memory per GPU: "141GB", "80GiB", "80Gi", "81559Mi"
  Json model_config;       // the model's config.json values; null: not given
  // Whether the spec says anything about planning at all.
  bool configured() const { return !gpu.empty() || !gpu_memory.empty() || !model_config.is_null(); }
};

struct InferenceModelSpec {
  int32_t replicas = 1;
  ArtifactSpec artifact;
  EngineSpec engine;
  ServingConfig serving;
  Resources resources;
  RolloutSpec rollout;
  SchedulingSpec scheduling;
  CapacityPlanningSpec capacity_planning;
};

// metav1.Condition: lastTransitionTime changes only when status flips.
struct Condition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;  // CamelCase
  std::string message;
  int64_t observed_generation = 0;
  WallTime last_transition_time{};
  bool operator==(const Condition&) const = default;
};

// A configuration that is served (stable) or being tried (canary).
struct ReleaseConfig {
  ServingConfig serving;
  EngineKind engine = EngineKind::kBundled;
  std::string artifact_path;
  std::string release_digest;  // "sha256:..." as reported by the agent; "" until a pod verified it
  std::optional<int64_t> release_version;
  std::string revision;  // hash of everything that defines the pods (names::revision)
  std::string summary;   // "int8/int8 ctx=32768 x16": what `kubectl get im` shows
  // The whole pod configuration (api::canonical_json of a PodConfig): what a restarted operator needs
  // to render this configuration again. Null in statuses written before it existed.
  Json pod_config;
  bool operator==(const ReleaseConfig&) const = default;
};

struct CanaryStatus {
  ReleaseConfig config;
  std::string workload;
  int32_t replicas = 0;
  int32_t ready_replicas = 0;
  bool operator==(const CanaryStatus&) const = default;
};

struct GateResult {
  std::string gate;     // "verification", "quality", "performance"
  std::string outcome;  // "Pending", "Passed", "Failed", "Inconclusive"
  std::string message;
  std::map<std::string, double> measurements;
  std::map<std::string, double> thresholds;
  WallTime at{};
  bool operator==(const GateResult&) const = default;
};

struct StageStatus {
  std::string name;      // a StageName spelling
  std::string revision;  // the canary configuration's revision
  // Never kIdle. kFailed: a gate failed and autoRollback is off (the canary is kept until an abort,
  // a retry or a new spec).
  StagePhase phase = StagePhase::kDeploying;
  WallTime started_at{};
  std::vector<GateResult> gate_results;
  std::string from_revision;                    // the stable revision the stage started from
  std::optional<WallTime> analysis_started_at;  // when the analysis window opened
  std::optional<WallTime> failed_at;            // when a gate failed (rollback duration starts here)
  std::string outcome;                          // while RollingBack: "RolledBack" or "Aborted"
  std::string failure_reason;                   // the failed gate's reason word
  std::string failure_message;                  // with its numbers
  bool operator==(const StageStatus&) const = default;
};

struct HistoryEntry {
  std::string stage;
  std::string revision;
  std::string outcome;  // "Promoted", "RolledBack", "Superseded", "Aborted", "Deployed"
  std::string reason;
  std::string message;
  WallTime at{};
  bool operator==(const HistoryEntry&) const = default;
};

inline constexpr size_t kMaxHistory = 20;

// Manual control and memory of failures, so that a restarted operator decides the same way.
struct RolloutControlStatus {
  std::string failed_for;   // the desired revision failedRevisions belong to (a new spec forgets them)
  std::string abort_token;  // the last serving.infergate.dev/abort annotation acted on
  std::string retry_token;  // the last serving.infergate.dev/retry annotation acted on
  bool halted = false;      // aborted: no stage starts until a retry or a new spec
  bool operator==(const RolloutControlStatus&) const = default;
};

struct InferenceModelStatus {
  int64_t observed_generation = 0;
  std::optional<ReleaseConfig> stable;
  std::optional<CanaryStatus> canary;
  std::optional<StageStatus> stage;
  std::vector<Condition> conditions;
  std::vector<HistoryEntry> history;          // newest last, at most kMaxHistory
  std::vector<std::string> failed_revisions;  // not retried until the spec changes
  RolloutControlStatus control;
  // Pods standing for spec.replicas: stable's, and a canary's that took its pods from stable
  // (surge: false). The scale subresource's status replicas.
  int32_t replicas = 0;
  int32_t ready_replicas = 0;
  // The label selector of the stable pods as a string ("serving.infergate.dev/model=glm,..."): the
  // scale subresource's labelSelectorPath, which HPA and KEDA read to find the pods they measure.
  std::string selector;
  bool operator==(const InferenceModelStatus&) const = default;
};

struct InferenceModel {
  ObjectMeta meta;
  InferenceModelSpec spec;
  InferenceModelStatus status;
  // The key the work queue and logs use: "namespace/name" ("name" when there is no namespace).
  std::string key() const;
};

// One field error: the path ("spec.serving.kvCacheDtype"), what is wrong, and a reason word.
struct FieldError {
  std::string path;
  std::string message;
  std::string reason = "InvalidSpec";
};

// Parses metadata only (name, namespace, uid, resourceVersion, generation, labels, annotations).
Result<ObjectMeta> parse_object_meta(const Json& obj);

// Parses and validates an InferenceModel object (apiVersion, kind, metadata, spec, status). Spec
// defaults are applied here as well as by the API server, so files read from disk behave the same.
// On failure the error's message lists every field error and its reason is that of the first one.
// A malformed status is not an error: it is replaced by an empty one (the operator rewrites it).
Result<InferenceModel> parse_inference_model(const Json& obj);

// The same validation, collecting every problem with the spec (for tests and for status messages).
std::vector<FieldError> validate_spec(const Json& spec, InferenceModelSpec* out);

Json status_to_json(const InferenceModelStatus& status);
Result<InferenceModelStatus> parse_status(const Json& status);

// "int8/int8 ctx=32768 x16"
std::string summarize(const ServingConfig& serving);

// The condition of this type, or nullptr.
const Condition* find_condition(const std::vector<Condition>& conditions, std::string_view type);

}  // namespace infergate::op::api
