// Deterministic names, labels and revisions for what the operator creates. Deterministic names are
// what make restarts safe: an operator killed after creating a workload adopts it by name.
#pragma once

#include <string>
#include <string_view>

#include "infergate/common/json.h"
#include "infergate/operator/api/inference_model.h"

namespace infergate::op::api {

namespace labels {
inline constexpr std::string_view kModel = "serving.infergate.dev/model";
inline constexpr std::string_view kTrack = "serving.infergate.dev/track";
inline constexpr std::string_view kRevision = "serving.infergate.dev/revision";
inline constexpr std::string_view kName = "app.kubernetes.io/name";
inline constexpr std::string_view kInstance = "app.kubernetes.io/instance";
inline constexpr std::string_view kComponent = "app.kubernetes.io/component";
inline constexpr std::string_view kManagedBy = "app.kubernetes.io/managed-by";
inline constexpr std::string_view kManagedByValue = "infergate-operator";
}  // namespace labels

namespace annotations {
// Hash of the rendered workload: equal hashes mean nothing to write.
inline constexpr std::string_view kTemplateHash = "serving.infergate.dev/template-hash";
inline constexpr std::string_view kRevision = "serving.infergate.dev/revision";
// Manual control of a rollout, set by people on the InferenceModel (docs/rollout.md):
inline constexpr std::string_view kPaused = "serving.infergate.dev/paused";  // "true": hold
inline constexpr std::string_view kPromote =
    "serving.infergate.dev/promote";                                       // <stage revision>: promote now
inline constexpr std::string_view kAbort = "serving.infergate.dev/abort";  // <new token>: roll back, halt
inline constexpr std::string_view kRetry = "serving.infergate.dev/retry";  // <new token>: start again
}  // namespace annotations

// Which Deployment of a model: the one serving (stable) or the one under test (canary).
enum class Track { kStable, kCanary };
std::string_view to_string(Track t);

// "glm" -> stable "glm", canary "glm-canary".
std::string workload_name(std::string_view model, Track track);
// The Service (or local router) in front of every ready pod of the model.
std::string endpoint_name(std::string_view model);
// The address of one track only, for the rollout's checks: "glm-stable", "glm-canary".
std::string track_endpoint_name(std::string_view model, Track track);
// The quality check of one canary revision: "glm-q-<revision>" (within 63 characters).
std::string quality_job_name(std::string_view model, std::string_view revision);

// Default image references, overridable by operator flags and spec.engine.image.
struct Images {
  std::string agent = "infergate/agent:0.1.0";
  std::string runtime = "infergate/runtime:0.1.0";            // CPU
  std::string runtime_cuda = "infergate/runtime-cuda:0.1.0";  // used when the pod asks for a GPU
  bool operator==(const Images&) const = default;
};

// Everything that defines what a pod runs: the spec's all but replicas and rollout policy, and the
// images the operator supplies (its agent, and its runtime where spec.engine.image is empty). The
// images are part of the configuration, so a new operator's images reach a model only through a
// gated stage (the artifact stage), never by re-rendering stable.
struct PodConfig {
  ArtifactSpec artifact;
  EngineSpec engine;
  ServingConfig serving;
  Resources resources;
  SchedulingSpec scheduling;
  // The operator's images this configuration runs with. Empty (agent "") in a configuration read
  // from a status written before images were recorded: rendering then uses the operator's own.
  Images images{"", "", ""};
};
// The spec's configuration with the operator's images (what the spec asks for now).
PodConfig pod_config(const InferenceModelSpec& spec, const Images& images);
// The same without images (for what does not render pods: capacity planning, older statuses).
PodConfig pod_config(const InferenceModelSpec& spec);
// `images` unless the configuration records its own.
const Images& images_of(const PodConfig& config, const Images& images);
// Canonical JSON of a PodConfig (stable key order), the input of revision(). The images are written
// only when recorded, so a configuration without them keeps the revision it had before they were.
Json canonical_json(const PodConfig& config);
// The inverse of canonical_json (status.stable.podConfig back into a PodConfig). Errors name the field.
Result<PodConfig> pod_config_from_json(const Json& j);
// A 10-hex-digit SHA-256 prefix of the canonical JSON: equal configurations, equal revisions.
std::string revision(const PodConfig& config);

// The first `hex_chars` hex digits of SHA-256(data).
std::string short_hash(std::string_view data, size_t hex_chars = 10);

// A ReleaseConfig describing a PodConfig (digest left empty).
ReleaseConfig release_config(const PodConfig& config);

}  // namespace infergate::op::api
