// The steady-state reconcile as a pure function: (InferenceModel, what the platform reports) ->
// (actions, new status, events, when to look again). No I/O, no clock reads: the controller gathers
// the observations, calls this, and carries out the result. The rollout state machine reuses the
// pieces (render_workload, verification_from_pods, the condition helpers) for its canary stages.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/verification.h"
#include "infergate/operator/controllers/capacity.h"
#include "infergate/operator/platform/platform.h"
#include "infergate/operator/reconcile/reconciler.h"

namespace infergate::op::controllers {

// How long to wait before checking a missing trust Secret again (Secrets are not watched).
inline constexpr std::chrono::seconds kTrustRecheck{30};

struct PlanContext {
  WallTime now{};
  api::Images images;
  api::Layout layout;
  std::chrono::nanoseconds trust_recheck = kTrustRecheck;
};

// What the platform reported for one model.
struct Observed {
  std::optional<platform::TrustState> trust;  // nullopt when not checked (invalid spec)
  platform::WorkloadState stable;
  platform::EndpointState endpoint;
  std::optional<CapacityVerdict> capacity;
};

struct PlannedAction {
  enum class Kind { kApplyWorkload, kApplyEndpoint, kDeleteWorkload };
  Kind kind;
  platform::WorkloadSpec workload;  // kApplyWorkload
  platform::EndpointSpec endpoint;  // kApplyEndpoint
  std::string name;                 // kDeleteWorkload
};

struct Plan {
  std::vector<PlannedAction> actions;
  api::InferenceModelStatus status;
  std::vector<platform::EventRecord> events;
  reconcile::Action next = reconcile::Action::await_change();
};

// The parsed model, or why its spec cannot be served (reason word + message).
struct ModelInput {
  api::ObjectMeta meta;
  std::optional<api::InferenceModelSpec> spec;  // nullopt: invalid
  std::string invalid_reason;
  std::string invalid_message;
  api::InferenceModelStatus status;  // as last written
};

// Reads an object into a ModelInput: metadata must parse (else an error); an invalid spec is not an
// error but an input the plan answers with a condition.
Result<ModelInput> read_model(const Json& object);

platform::ModelRef model_ref(const api::ObjectMeta& meta);
// Labels every workload and endpoint of the model carries.
std::map<std::string, std::string> model_labels(const std::string& model, api::Track track);
// The workload for a pod configuration on a track (engine adapter + agent command). Errors are the
// adapter's refusals (UnsupportedKvCacheDtype, ...).
Result<platform::WorkloadSpec> render_workload(const std::string& model, const api::PodConfig& config,
                                               api::Track track, int32_t replicas, const PlanContext& ctx);
platform::EndpointSpec render_endpoint(const std::string& model);

// The agent verdicts of the pods running `revision`: refusals first (by pod name), then successes.
struct PodVerdicts {
  std::vector<std::pair<std::string, api::VerificationReport>> refused;   // (pod, report)
  std::vector<std::pair<std::string, api::VerificationReport>> verified;  // (pod, report)
};
PodVerdicts verification_from_pods(const platform::WorkloadState& workload, const std::string& revision);

// The steady state: one Deployment-like workload serving the spec, a Service in front, status per the
// API conventions. Spec changes are applied to the stable workload directly (a rolling update that
// never drops below the serving replicas); staged canaries build on this in the rollout controller.
Plan plan_steady_state(const ModelInput& model, const Observed& observed, const PlanContext& ctx);

}  // namespace infergate::op::controllers
