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
#include "infergate/operator/rollout/gates.h"

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
  platform::DisruptionBudgetState disruption_budget;
  std::optional<CapacityVerdict> capacity;
  // The rollout's view (empty when no stage runs).
  platform::WorkloadState canary;
  platform::EndpointState stable_endpoint;          // "<model>-stable": the eval job's baseline
  platform::EndpointState canary_endpoint;          // "<model>-canary": its candidate
  std::optional<platform::JobState> quality_job;    // the running stage's eval job
  std::optional<rollout::GateVerdict> performance;  // measured once the analysis window is over
  std::optional<CapacityVerdict> stage_capacity;    // the next stage's configuration, re-planned
  // What serves, re-planned when no stage is pending (capacityPlanning may have changed): shown in
  // CapacityFits, never blocks (it is already running).
  std::optional<CapacityVerdict> serving_capacity;
};

struct PlannedAction {
  enum class Kind {
    kApplyWorkload,
    kApplyEndpoint,
    kDeleteWorkload,
    kApplyJob,
    kDeleteJob,
    kApplyDisruptionBudget
  };
  Kind kind;
  platform::WorkloadSpec workload;        // kApplyWorkload
  platform::EndpointSpec endpoint;        // kApplyEndpoint
  std::string name;                       // kDeleteWorkload, kDeleteJob
  platform::JobSpec job;                  // kApplyJob
  platform::DisruptionBudgetSpec budget;  // kApplyDisruptionBudget
};

// What the rollout reports to metrics (the plan stays pure; the controller records these once the
// status that goes with them is written).
struct RolloutEvent {
  enum class Kind { kStageFinished, kRolloutFinished, kRollbackDuration, kVerificationFailure };
  Kind kind;
  std::string stage;  // kStageFinished
  std::string
      outcome;  // kStageFinished, kRolloutFinished: Promoted, RolledBack, Aborted, Superseded, Completed
  std::string reason;  // kVerificationFailure
  double seconds = 0;  // kRollbackDuration
  bool operator==(const RolloutEvent&) const = default;
};

struct Plan {
  std::vector<PlannedAction> actions;
  api::InferenceModelStatus status;
  std::vector<platform::EventRecord> events;
  reconcile::Action next = reconcile::Action::await_change();
  std::vector<RolloutEvent> rollout_events;
  // Stable pods whose verified release digest is not status.stable's (nullopt: not known).
  std::optional<int> version_drift;
};

// What the stable workload should run, when it is not simply the spec (a rollout holds it at the
// last promoted configuration, or scales it down for a canary that does not surge).
struct StableTarget {
  api::PodConfig config;
  int32_t replicas = 1;
  bool promotion = false;  // stable takes a promoted canary's configuration: no "Deployed" history
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
// The labels that select the model's stable pods, and the same as a selector string
// ("serving.infergate.dev/model=glm,serving.infergate.dev/track=stable"): status.selector (what the
// scale subresource gives HPA and KEDA) and the PodDisruptionBudget select with them.
std::map<std::string, std::string> stable_pod_labels(const std::string& model);
std::string stable_selector(const std::string& model);
// The stable pods' disruption budget for `replicas` (spec.replicas): node drains may take a quarter of
// them at a time, rounded down, and always at least one, so that a drain never waits forever (a
// single-replica model is drained like any Deployment's pod; give it two replicas to stay up):
//   replicas 0-7: maxUnavailable 1;  8-11: 2;  12-15: 3;  ...;  R: R / 4.
platform::DisruptionBudgetSpec render_disruption_budget(const std::string& model, int32_t replicas);

// Whether the platform holds `spec` as rendered (template, replicas, update strategy) and has acted
// on it: nothing to apply.
bool is_applied(const platform::WorkloadState& observed, const platform::WorkloadSpec& spec);
// Whether `observed` fully runs `spec`: applied, every pod of its revision, all of them updated and
// ready. What the steady state calls rolled out and a promotion waits for.
bool runs_fully(const platform::WorkloadState& observed, const platform::WorkloadSpec& spec);

// The agent verdicts of the pods running `revision`: refusals first (by pod name), then successes.
struct PodVerdicts {
  std::vector<std::pair<std::string, api::VerificationReport>> refused;   // (pod, report)
  std::vector<std::pair<std::string, api::VerificationReport>> verified;  // (pod, report)
};
PodVerdicts verification_from_pods(const platform::WorkloadState& workload, const std::string& revision);

// The steady state: one Deployment-like workload serving the spec, a Service in front, status per the
// API conventions. Spec changes are applied to the stable workload directly (a rolling update that
// never drops below the serving replicas); staged canaries build on this in the rollout controller.
// With `target`, the stable workload runs target->config with target->replicas instead of the spec.
Plan plan_steady_state(const ModelInput& model, const Observed& observed, const PlanContext& ctx,
                       const StableTarget* target = nullptr);

}  // namespace infergate::op::controllers
