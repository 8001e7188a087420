// The staged rollout as an explicit state machine (docs/rollout.md, "The state machine"). The phase
// is status.stage.phase (Idle when no stage runs); a function per phase (on_idle, on_running,
// on_promoting, on_rolling_back, on_failed) reads what the platform reports and returns the phase to
// move to with the actions, events, history and conditions that go with the move. Deploying,
// Verifying and Analyzing share on_running: which of the three a stage is in follows from what is
// observed (canary pods exist; verified and ready; the window opened), and every step re-judges all
// the gates, so a stage can fail from any of the three. Pure: no I/O, no clock reads, so a restarted
// operator that reads the same status and observes the same world takes the same step (the names it
// creates are deterministic).
//
//   Idle ──start──▶ Deploying ──pods exist──▶ Verifying ──verified+ready──▶ Analyzing
//                     │  ▲ superseded (spec changed, retry of a Failed stage) ──▶ Idle
//                     ▼  │
//        a gate fails / a canary pod cannot run / deadline / abort
//             ├─ autoRollback ──▶ RollingBack ──canary gone──▶ Idle
//             └─ no autoRollback ──▶ Failed ──abort──▶ RollingBack
//   Analyzing ──every gate passed, window over (or promote annotation)──▶ Promoting ──stable rolled──▶ Idle
//
// GPU arithmetic (spec.rollout.canary, docs/rollout.md "A canary that fits"): with R = spec.replicas
// and C = canary.replicas pods of G GPUs each,
//   surge: true   stable R + canary C, peak (R + C)·G; stable's own rolling update during the
//                 promotion removes a pod before it adds one, so it never adds a pod on top;
//   surge: false  stable R - C + canary C = R pods, peak R·G, and each side grows only into GPUs the
//                 other has already released (observed, not assumed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "infergate/operator/controllers/steady_state.h"
#include "infergate/operator/rollout/gates.h"
#include "infergate/operator/rollout/stages.h"

namespace infergate::op::controllers {

// What every phase function decides from: the model, the observations, and what is derived from
// them once per reconcile.
struct RolloutContext {
  const ModelInput& in;
  const Observed& ob;
  const PlanContext& ctx;
  const api::InferenceModelSpec& spec;
  api::PodConfig stable;               // what serves (status.stable)
  api::PodConfig desired;              // what the spec asks for
  std::string desired_revision;        // api::revision(desired)
  std::vector<rollout::Stage> stages;  // from stable to desired; front() is the one to run
  // Manual control (annotations), already compared with the tokens status.control remembers.
  bool abort_requested = false;  // a new serving.infergate.dev/abort token
  bool retried = false;          // a new serving.infergate.dev/retry token
  bool paused = false;
  std::string promote_revision;  // serving.infergate.dev/promote
};

// The rollout's part of status, read before a step and written back after it.
struct RolloutState {
  std::optional<api::StageStatus> stage;
  std::optional<api::CanaryStatus> canary;
  std::vector<std::string> failed_revisions;
  api::RolloutControlStatus control;
  api::StagePhase phase() const { return stage ? stage->phase : api::StagePhase::kIdle; }
};

// What one phase function decided.
struct Step {
  api::StagePhase next = api::StagePhase::kIdle;  // the phase after this step
  // Run next's function in the same reconcile (a superseded stage, a finished rollback: the next
  // stage, or the reason none starts, is decided now rather than one reconcile later).
  bool again = false;
  std::vector<PlannedAction> actions;
  std::vector<platform::EventRecord> events;
  std::vector<RolloutEvent> metrics;
  std::vector<api::HistoryEntry> history;
  std::optional<api::Condition> progressing;  // overrides the steady state's when set
  std::optional<api::Condition> rolled_back;
  std::optional<api::Condition> capacity;
  // What the stable workload runs meanwhile; nullopt: the configuration that serves, at
  // spec.replicas.
  std::optional<StableTarget> stable;
  reconcile::Action requeue = reconcile::Action::await_change();
  // Set when this step finished a promotion: the steady state's stable then carries the canary's
  // release (digest and version) if its own pods have not reported one.
  std::optional<api::ReleaseConfig> promoted;
};

// Manual control and the memory of failures, before any phase runs: a new spec forgets failed
// revisions; new abort / retry tokens are remembered (and announced with an event).
RolloutContext rollout_context(const ModelInput& in, const Observed& ob, const PlanContext& ctx,
                               const api::PodConfig& stable, RolloutState& state, Step& step);

// A running or failed stage whose revision is no longer the next one (the spec changed), or a
// Failed stage retried, is superseded: nullopt when it is not.
std::optional<Step> supersede(const RolloutContext& c, RolloutState& s);

// One function per phase. Each may change `s` (gate results, timestamps, the stage itself).
Step on_idle(const RolloutContext& c, RolloutState& s);
Step on_running(const RolloutContext& c, RolloutState& s);  // Deploying, Verifying, Analyzing
Step on_promoting(const RolloutContext& c, RolloutState& s);
Step on_rolling_back(const RolloutContext& c, RolloutState& s);
Step on_failed(const RolloutContext& c, RolloutState& s);

// The step the machine takes from s.phase(): supersede first, then the phase's function, then (while
// a step says `again`) the next phase's, at most once per phase. The steps are merged in order.
Step run_machine(const RolloutContext& c, RolloutState& s);

// The analysis gates of a running stage, in the order the decision reads them (quality, then
// performance). This is the seam for gates of other engines: each entry names its gate and says
// Pending, Passed, Failed, Inconclusive or Skipped. Appends the quality check's Job to `actions`
// when it is time to start it.
std::vector<rollout::NamedVerdict> analysis_gates(const RolloutContext& c, const api::StageStatus& stage,
                                                  bool canary_ready, bool window_elapsed,
                                                  std::vector<PlannedAction>& actions);

// How many pods each track may hold (see the arithmetic above). `holding` is what a workload holds
// now: the larger of its desired replicas and its pods that still exist.
int32_t holding(const platform::WorkloadState& w);

}  // namespace infergate::op::controllers
