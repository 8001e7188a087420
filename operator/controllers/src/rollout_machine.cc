// The rollout's phases, one function each. Pure.
#include "infergate/operator/controllers/rollout_machine.h"

#include <algorithm>
#include <cstdio>

#include "infergate/operator/api/conditions.h"
#include "infergate/operator/controllers/pod_trouble.h"

namespace infergate::op::controllers {
namespace {

namespace cond = api::condition;
using api::StagePhase;
using platform::EventRecord;
using rollout::GateVerdict;
using rollout::Outcome;
constexpr auto make = api::make_condition;

std::string annotation(const ModelInput& in, std::string_view key) {
  auto it = in.meta.annotations.find(std::string(key));
  return it == in.meta.annotations.end() ? "" : it->second;
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string num(double v) {
  char buf[64];
  (void)std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

WallTime trunc(WallTime t) { return std::chrono::time_point_cast<std::chrono::seconds>(t); }

// "ttft_p95_ratio 2.1 (limit 1.5), error_rate 0 (limit 0.05)": a gate's numbers for conditions and events.
std::string numbers(const GateVerdict& v) {
  std::string s;
  for (const auto& [k, t] : v.thresholds) {
    auto m = v.measurements.find(k);
    s += (s.empty() ? "" : ", ") + k + " " + (m == v.measurements.end() ? "n/a" : num(m->second)) +
         " (limit " + num(t) + ")";
  }
  return s;
}

api::GateResult gate_result(std::string_view gate, const GateVerdict& v, const api::StageStatus& previous,
                            WallTime now) {
  api::GateResult r;
  r.gate = std::string(gate);
  r.outcome = std::string(rollout::to_string(v.outcome));
  r.message = v.message;
  r.measurements = v.measurements;
  r.thresholds = v.thresholds;
  r.at = trunc(now);
  // Unchanged results keep their time: reconciling an unchanged stage writes nothing.
  for (const auto& p : previous.gate_results) {
    if (p.gate == r.gate && p.outcome == r.outcome && p.message == r.message) r.at = p.at;
  }
  return r;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

reconcile::Action sooner(const reconcile::Action& a, std::chrono::nanoseconds d) {
  if (d < std::chrono::milliseconds(100)) d = std::chrono::milliseconds(100);
  return a.merge(reconcile::Action::requeue_after(std::chrono::duration_cast<std::chrono::milliseconds>(d)));
}

platform::EndpointSpec track_endpoint(const std::string& model, api::Track track) {
  platform::EndpointSpec e;
  e.name = api::track_endpoint_name(model, track);
  e.selector = {{std::string(api::labels::kModel), model},
                {std::string(api::labels::kTrack), std::string(api::to_string(track))}};
  e.labels = model_labels(model, track);
  e.port = 80;
  return e;
}

std::string describe(const api::StageStatus& s) {
  return "stage " + s.name + " (revision " + s.revision + ")";
}

std::string reason_of(const Error& e, std::string_view fallback) {
  return e.reason().empty() ? std::string(fallback) : e.reason();
}

const std::string& model_name(const RolloutContext& c) { return c.in.meta.name; }
int64_t generation(const RolloutContext& c) { return c.in.meta.generation; }
bool surge(const RolloutContext& c) { return c.spec.rollout.canary.surge; }

// A workload of this model with the rollout's update strategy (what the steady state renders too).
Result<platform::WorkloadSpec> render(const RolloutContext& c, const api::PodConfig& config, api::Track track,
                                      int32_t replicas) {
  auto w = render_workload(c.in.meta.name, config, track, replicas, c.ctx);
  if (w.ok()) w->surge = surge(c);
  return w;
}

void history(Step& step, const RolloutContext& c, const std::string& stage, const std::string& revision,
             const std::string& outcome, const std::string& reason, const std::string& message) {
  step.history.push_back(
      api::HistoryEntry{stage, revision, outcome, reason, message.substr(0, 1024), trunc(c.ctx.now)});
}

// Removes the canary workload (if it exists) and the stage's quality Job (if `revision` names one
// that exists). Idempotent within a step.
void delete_canary(const RolloutContext& c, Step& step, const std::string& revision) {
  const std::string canary = api::workload_name(model_name(c), api::Track::kCanary);
  auto planned = [&](PlannedAction::Kind kind, const std::string& name) {
    return std::any_of(step.actions.begin(), step.actions.end(),
                       [&](const PlannedAction& a) { return a.kind == kind && a.name == name; });
  };
  if (c.ob.canary.exists && !planned(PlannedAction::Kind::kDeleteWorkload, canary))
    step.actions.push_back({PlannedAction::Kind::kDeleteWorkload, {}, {}, canary, {}, {}});
  if (revision.empty() || !c.ob.quality_job || !c.ob.quality_job->exists) return;
  const std::string job = api::quality_job_name(model_name(c), revision);
  if (!planned(PlannedAction::Kind::kDeleteJob, job))
    step.actions.push_back({PlannedAction::Kind::kDeleteJob, {}, {}, job, {}, {}});
}

// ---- The GPU arithmetic (rollout_machine.h) ----

// Canary pods a running stage may have: C with surge; without, only what stable has already given up
// (stable's target is R - C, but its pods go away only as the platform removes them).
// A running canary never shrinks: a stable pod that is being replaced (an eviction) holds one more
// pod for a moment, which must not cost the canary a pod mid-analysis.
int32_t canary_size(const RolloutContext& c) {
  const int32_t want = c.spec.rollout.canary.replicas;
  if (surge(c)) return want;
  const int32_t has = c.ob.canary.exists ? std::min(c.ob.canary.replicas, want) : 0;
  return std::max(has, std::clamp(c.spec.replicas - holding(c.ob.stable), 0, want));
}

// Stable's replicas while a stage runs.
int32_t stable_size_running(const RolloutContext& c) {
  return surge(c) ? c.spec.replicas : std::max(1, c.spec.replicas - c.spec.rollout.canary.replicas);
}

// Stable's replicas while the canary goes away (a rollback, the end of a promotion): without surge it
// grows back only into what the canary has released.
int32_t stable_size_shrinking_canary(const RolloutContext& c, int32_t canary_target) {
  if (surge(c)) return c.spec.replicas;
  const int32_t canary_holds = c.ob.canary.exists ? std::max(canary_target, holding(c.ob.canary)) : 0;
  return std::max(1, c.spec.replicas - canary_holds);
}

// ---- The gates of a running stage ----

int ready_pods(const platform::WorkloadState& w, const std::string& revision) {
  int ready = 0;
  for (const auto& p : w.pods) ready += !p.deleting && p.revision == revision && p.ready;
  return ready;
}

// A canary pod trouble that waiting does not heal fails the stage at once, under the rollback reason
// that says which way: it was never created, it cannot start, or it starts and does not serve.
std::optional<rollout::PodFailure> unhealable(const std::optional<PodTrouble>& t) {
  if (!t || t->heals) return std::nullopt;
  const std::string reason = t->reason == "FailedCreate" ? "CanaryNotCreated"
                             : t->reason == "CrashLoopBackOff" || t->reason == "OOMKilled"
                                 ? "CanaryNotServing"
                                 : "CanaryCannotStart";
  return rollout::PodFailure{reason, "a canary pod cannot run: " + t->message + trouble_hint(*t)};
}

GateVerdict verification_gate(const RolloutContext& c, RolloutState& s, int32_t canary_replicas) {
  GateVerdict v;
  const PodVerdicts verdicts = verification_from_pods(c.ob.canary, s.stage->revision);
  if (!verdicts.refused.empty()) {
    const auto& [pod, r] = verdicts.refused.front();
    v.outcome = Outcome::kFailed;
    v.reason = r.reason;
    v.message = r.describe() + " (pod " + pod + ", agent exit code " + std::to_string(r.exit_code) + ")";
  } else if (canary_replicas > 0 && static_cast<int32_t>(verdicts.verified.size()) >= canary_replicas) {
    const auto& r = verdicts.verified.front().second;
    v.outcome = Outcome::kPassed;
    v.reason = "Verified";
    v.message = "release " + r.release_digest + " verified on " + std::to_string(verdicts.verified.size()) +
                " canary pod(s)";
    if (s.canary) {
      s.canary->config.release_digest = r.release_digest;
      s.canary->config.release_version = r.version;
    }
  } else {
    v.outcome = Outcome::kPending;
    v.reason = "AwaitingVerification";
    v.message = std::to_string(verdicts.verified.size()) + "/" +
                std::to_string(c.spec.rollout.canary.replicas) + " canary pods verified";
  }
  return v;
}

GateVerdict quality_gate(const RolloutContext& c, const api::StageStatus& stage, bool canary_ready,
                         std::vector<PlannedAction>& actions) {
  const auto& q = c.spec.rollout.quality;
  GateVerdict v;
  if (!rollout::quality_configured(q)) {
    v.outcome = Outcome::kSkipped;
    v.reason = "NotConfigured";
    v.message = "no thresholds in spec.rollout.gates.quality";
    return v;
  }
  if (!stage.analysis_started_at) {
    v.outcome = Outcome::kPending;
    v.reason = "AwaitingCanary";
    v.message = "runs once the canary is verified and ready";
    return v;
  }
  platform::JobState job = c.ob.quality_job.value_or(platform::JobState{});
  // A check starts only against a serving canary and endpoints with addresses (after an operator
  // restart the local platform's pods and endpoints come back a moment later).
  if (!job.exists && canary_ready && !c.ob.stable_endpoint.url.empty() && !c.ob.canary_endpoint.url.empty()) {
    platform::JobSpec js;
    js.name = api::quality_job_name(model_name(c), stage.revision);
    js.labels = model_labels(model_name(c), api::Track::kCanary);
    js.labels[std::string(api::labels::kRevision)] = stage.revision;
    js.container = rollout::eval_command(q, c.ob.stable_endpoint.url, c.ob.canary_endpoint.url,
                                         c.ctx.images.runtime, c.ctx.layout.termination_log);
    js.deadline_seconds = q.timeout_seconds;
    actions.push_back({PlannedAction::Kind::kApplyJob, {}, {}, "", js, {}});
  }
  return rollout::evaluate_quality_job(q, job, c.ctx.now);
}

GateVerdict performance_gate(const RolloutContext& c, const api::StageStatus& stage, bool window_elapsed) {
  GateVerdict v;
  if (!rollout::performance_configured(c.spec.rollout.performance)) {
    v.outcome = Outcome::kSkipped;
    v.reason = "NotConfigured";
    v.message = "no thresholds in spec.rollout.gates.performance";
  } else if (!window_elapsed) {
    v.outcome = Outcome::kPending;
    v.reason = "AnalysisWindow";
    v.message =
        stage.analysis_started_at
            ? "analysis window of " + std::to_string(c.spec.rollout.canary.analysis_seconds) + " s running"
            : "starts once the canary is verified and ready";
  } else if (c.ob.performance) {
    v = *c.ob.performance;
  } else {
    v.outcome = Outcome::kPending;
    v.reason = "Measuring";
    v.message = "measuring the analysis window";
  }
  return v;
}

// The stage leaves for RollingBack (or Failed without autoRollback) after decision `d`.
void roll_back(const RolloutContext& c, RolloutState& s, const rollout::Decision& d,
               const rollout::StageInputs& si, const std::string& what, Step& step) {
  api::StageStatus& stage = *s.stage;
  const int64_t gen = generation(c);
  std::string msg = d.gate + " gate: " + d.message;
  for (const auto& g : si.analysis) {
    if (g.gate == d.gate && !g.verdict.thresholds.empty()) msg += " [" + numbers(g.verdict) + "]";
  }
  stage.failed_at = trunc(c.ctx.now);
  stage.failure_reason = d.reason;
  stage.failure_message = msg.substr(0, 2048);
  if (d.gate == rollout::kVerificationGate && !d.aborted)
    step.metrics.push_back({RolloutEvent::Kind::kVerificationFailure, "", "", d.reason, 0});
  if (!c.spec.rollout.auto_rollback && !d.aborted) {
    if (stage.phase != StagePhase::kFailed) {
      step.events.push_back(
          {EventRecord::Type::kWarning, "GateFailed", what + ": " + msg + " (autoRollback is off)"});
    }
    stage.phase = StagePhase::kFailed;
    step.next = StagePhase::kFailed;
    step.progressing = make(cond::kProgressing, cond::kFalse, d.reason,
                            what + " failed and autoRollback is off: " + msg, gen);
    return;
  }
  stage.phase = StagePhase::kRollingBack;
  stage.outcome = d.aborted ? "Aborted" : "RolledBack";
  step.next = StagePhase::kRollingBack;
  step.stable = StableTarget{c.stable, stable_size_shrinking_canary(c, 0), false};
  delete_canary(c, step, stage.revision);
  s.control.failed_for = c.desired_revision;
  if (d.aborted) {
    s.control.halted = true;
    step.events.push_back({EventRecord::Type::kWarning, "Aborted",
                           what + ": aborted; the canary goes away, stable is untouched"});
  } else {
    if (!contains(s.failed_revisions, stage.revision)) s.failed_revisions.push_back(stage.revision);
    step.rolled_back = make(cond::kRolledBack, cond::kTrue, d.reason, what + " rolled back: " + msg, gen);
    step.events.push_back({EventRecord::Type::kWarning, "RolledBack", what + " rolled back: " + msg});
  }
  step.progressing = make(cond::kProgressing, cond::kTrue, "RollingBack",
                          what + ": removing the canary (" + d.reason + ")", gen);
}

// The stage waits (decision kWait) in a running phase: say where it is, look again when a timer
// it waits for runs out.
void wait(const RolloutContext& c, const api::StageStatus& stage, const rollout::StageInputs& si,
          const std::string& what, Step& step) {
  std::string detail = stage.phase == StagePhase::kAnalyzing   ? "analyzing"
                       : stage.phase == StagePhase::kVerifying ? "verifying the canary"
                                                               : "deploying the canary";
  if (c.paused) detail += " (paused)";
  step.progressing =
      make(cond::kProgressing, cond::kTrue, c.paused ? "Paused" : std::string(api::to_string(stage.phase)),
           what + ": " + detail, generation(c));
  if (!si.canary_ready) {
    step.requeue = sooner(
        step.requeue,
        stage.started_at + std::chrono::seconds(c.spec.rollout.canary.progress_deadline_seconds) - c.ctx.now);
  }
  if (stage.analysis_started_at && !si.window_elapsed) {
    step.requeue =
        sooner(step.requeue, *stage.analysis_started_at +
                                 std::chrono::seconds(c.spec.rollout.canary.analysis_seconds) - c.ctx.now);
  }
  for (const auto& g : si.analysis) {
    if (g.verdict.outcome != Outcome::kPending || !stage.analysis_started_at) continue;
    // The performance verdict is measured once the window is over; the quality Job is polled.
    if (g.gate == rollout::kPerformanceGate && si.window_elapsed)
      step.requeue = sooner(step.requeue, std::chrono::seconds(1));
    if (g.gate == rollout::kQualityGate) step.requeue = sooner(step.requeue, std::chrono::seconds(5));
  }
}

// A canary pod trouble that may heal (no node with room yet, an image pull backing off): the stage
// waits for it until its deadline, saying why in Progressing, with one Warning when it appears.
void say_trouble(const RolloutContext& c, const PodTrouble& t, const std::string& what, Step& step) {
  std::string hint = trouble_hint(t);
  if (t.reason == "Unschedulable" && surge(c))
    hint += "; without spare GPUs, spec.rollout.canary.surge: false takes the canary's GPUs from stable";
  step.progressing =
      make(cond::kProgressing, cond::kTrue, t.reason, what + ": waiting: " + t.message + hint, generation(c));
  const api::Condition* before = api::find_condition(c.in.status.conditions, cond::kProgressing);
  if (!before || before->reason != t.reason)
    step.events.push_back({EventRecord::Type::kWarning, "Canary" + t.reason, what + ": " + t.message + hint});
}

}  // namespace

int32_t holding(const platform::WorkloadState& w) {
  if (!w.exists) return 0;
  // A deleting pod still holds its GPUs until it is gone.
  return std::max(w.replicas, static_cast<int32_t>(w.pods.size()));
}

RolloutContext rollout_context(const ModelInput& in, const Observed& ob, const PlanContext& ctx,
                               const api::PodConfig& stable, RolloutState& s, Step& step) {
  const api::InferenceModelSpec& spec = *in.spec;
  RolloutContext c{in, ob, ctx,   spec,  stable, api::pod_config(spec, ctx.images),
                   "", {}, false, false, false,  ""};
  c.desired_revision = api::revision(c.desired);
  c.stages = rollout::plan_stages(stable, c.desired, spec.rollout.stage_order);
  if (!s.control.failed_for.empty() && s.control.failed_for != c.desired_revision) {
    s.failed_revisions.clear();  // the spec changed: failed revisions may be tried again
    s.control.failed_for.clear();
    s.control.halted = false;
  }
  if (std::string t = annotation(in, api::annotations::kAbort); !t.empty() && t != s.control.abort_token) {
    s.control.abort_token = t;
    c.abort_requested = true;
    s.control.halted = true;
    s.control.failed_for = c.desired_revision;
    step.events.push_back(
        {EventRecord::Type::kWarning, "AbortRequested",
         "rollout aborted by annotation " + std::string(api::annotations::kAbort) + "=" + t});
  }
  if (std::string t = annotation(in, api::annotations::kRetry); !t.empty() && t != s.control.retry_token) {
    s.control.retry_token = t;
    s.failed_revisions.clear();
    s.control.halted = false;
    s.control.failed_for.clear();
    c.retried = true;
    step.events.push_back(
        {EventRecord::Type::kNormal, "RetryRequested",
         "rollout restarts by annotation " + std::string(api::annotations::kRetry) + "=" + t});
  }
  c.paused = annotation(in, api::annotations::kPaused) == "true";
  c.promote_revision = annotation(in, api::annotations::kPromote);
  return c;
}

std::optional<Step> supersede(const RolloutContext& c, RolloutState& s) {
  if (!s.stage) return std::nullopt;
  const StagePhase phase = s.stage->phase;
  if (phase == StagePhase::kPromoting || phase == StagePhase::kRollingBack) return std::nullopt;  // committed
  const bool current = !c.stages.empty() && c.stages.front().revision == s.stage->revision;
  if (current && !(c.retried && phase == StagePhase::kFailed)) return std::nullopt;
  Step step;
  const api::StageStatus& stage = *s.stage;
  const std::string why =
      !current ? "the spec changed (generation " + std::to_string(generation(c)) + ")" : "retry";
  history(step, c, stage.name, stage.revision, "Superseded", !current ? "SpecChanged" : "Retried",
          describe(stage) + " superseded: " + why);
  step.metrics.push_back({RolloutEvent::Kind::kStageFinished, stage.name, "Superseded", "", 0});
  step.metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", "Superseded", "", 0});
  step.events.push_back({EventRecord::Type::kNormal, "Superseded", describe(stage) + " superseded: " + why});
  // The canary itself is replaced in place if a new stage starts now, else deleted by Idle.
  if (c.ob.quality_job && c.ob.quality_job->exists)
    step.actions.push_back({PlannedAction::Kind::kDeleteJob,
                            {},
                            {},
                            api::quality_job_name(model_name(c), stage.revision),
                            {},
                            {}});
  s.stage.reset();
  s.canary.reset();
  step.next = StagePhase::kIdle;
  step.again = true;
  return step;
}

Step on_idle(const RolloutContext& c, RolloutState& s) {
  Step step;
  step.next = StagePhase::kIdle;
  const std::string& name = model_name(c);
  const int64_t gen = generation(c);
  if (c.stages.empty()) {
    if (c.ob.canary.exists) delete_canary(c, step, "");  // a leftover (the spec went back to what serves)
    step.stable = StableTarget{c.stable, stable_size_shrinking_canary(c, 0), false};
    if (c.ob.serving_capacity) {
      // Nothing to roll out: say whether what serves fits the hardware the spec now names. It already
      // runs, so a False here warns (an Event) but blocks nothing. The message is the one the first
      // deployment's check wrote for the same configuration, so an unchanged model writes nothing.
      step.capacity = make(cond::kCapacityFits, c.ob.serving_capacity->condition_status(),
                           c.ob.serving_capacity->reason, c.ob.serving_capacity->message, gen);
    }
    return step;
  }
  const rollout::Stage& s0 = c.stages.front();
  const std::string what =
      "stage " + std::string(api::to_string(s0.name)) + " (revision " + s0.revision + ") [" + s0.change + "]";
  // Whether stable serves its configuration fully (a stage starts only from a healthy stable).
  auto stable_rendered = render(c, c.stable, api::Track::kStable, c.spec.replicas);
  const bool stable_healthy = stable_rendered.ok() && c.ob.stable.exists && c.ob.stable.observed_current &&
                              c.ob.stable.template_hash == stable_rendered->template_hash() &&
                              c.ob.stable.replicas == c.spec.replicas &&
                              c.ob.stable.ready_replicas >= c.spec.replicas;
  auto keep_out_canary = [&] {
    if (c.ob.canary.exists) delete_canary(c, step, "");
    step.stable = StableTarget{c.stable, stable_size_shrinking_canary(c, 0), false};
  };
  if (c.abort_requested || s.control.halted) {
    step.progressing = make(cond::kProgressing, cond::kFalse, "Aborted",
                            "the rollout was aborted before " + what + "; annotate " +
                                std::string(api::annotations::kRetry) +
                                " with a new value (or change the spec) to start again",
                            gen);
    keep_out_canary();
    return step;
  }
  if (contains(s.failed_revisions, s0.revision)) {
    step.progressing = make(cond::kProgressing, cond::kFalse, "RevisionFailed",
                            what +
                                " failed before (see the RolledBack condition) and is not retried until the "
                                "spec changes or " +
                                std::string(api::annotations::kRetry) + " is set",
                            gen);
    keep_out_canary();
    return step;
  }
  if (c.paused) {
    step.progressing = make(cond::kProgressing, cond::kFalse, "Paused", what + " waits: rollout paused", gen);
    return step;
  }
  if (!stable_healthy) {
    step.progressing =
        make(cond::kProgressing, cond::kTrue, "WaitingForStable",
             what + " starts once stable serves all " + std::to_string(c.spec.replicas) + " replicas", gen);
    return step;
  }
  if (c.ob.stage_capacity && c.ob.stage_capacity->blocks()) {
    step.capacity = make(cond::kCapacityFits, cond::kFalse, c.ob.stage_capacity->reason,
                         what + ": " + c.ob.stage_capacity->message, gen);
    step.progressing = make(cond::kProgressing, cond::kFalse, c.ob.stage_capacity->reason,
                            what + " does not fit: " + c.ob.stage_capacity->message, gen);
    return step;
  }
  if (const auto unmeasurable = rollout::unmeasurable_thresholds(c.spec); !unmeasurable.empty()) {
    // The gates could never pass: refuse the stage before a canary costs anything.
    std::string why;
    for (const auto& u : unmeasurable) why += (why.empty() ? "" : "; ") + u.field + ": " + u.why;
    step.progressing =
        make(cond::kProgressing, cond::kFalse, "GateNotMeasurable",
             what + " cannot be judged: " + why + "; remove the threshold or use the bundled engine", gen);
    return step;
  }
  const int32_t canary_replicas = canary_size(c);
  auto rendered = render(c, s0.to, api::Track::kCanary, canary_replicas);
  if (!rendered.ok()) {
    step.progressing = make(cond::kProgressing, cond::kFalse, reason_of(rendered.error(), "InvalidStage"),
                            what + " cannot run: " + rendered.error().message(), gen);
    return step;
  }
  if (c.ob.stage_capacity) {
    // True (it fits), or Unknown (not checked: said, and not blocking).
    step.capacity = make(cond::kCapacityFits, c.ob.stage_capacity->condition_status(),
                         c.ob.stage_capacity->reason, what + ": " + c.ob.stage_capacity->message, gen);
  }
  api::StageStatus ns;
  ns.name = std::string(api::to_string(s0.name));
  ns.revision = s0.revision;
  ns.phase = StagePhase::kDeploying;
  ns.started_at = trunc(c.ctx.now);
  ns.from_revision = api::revision(c.stable);
  s.stage = ns;
  api::CanaryStatus cs;
  cs.config = api::release_config(s0.to);
  cs.workload = api::workload_name(name, api::Track::kCanary);
  cs.replicas = c.spec.rollout.canary.replicas;
  s.canary = cs;
  step.next = StagePhase::kDeploying;
  step.stable = StableTarget{c.stable, stable_size_running(c), false};
  step.actions.push_back({PlannedAction::Kind::kApplyWorkload, *rendered, {}, "", {}, {}});
  for (api::Track t : {api::Track::kStable, api::Track::kCanary}) {
    platform::EndpointSpec e = track_endpoint(name, t);
    const platform::EndpointState& have =
        t == api::Track::kStable ? c.ob.stable_endpoint : c.ob.canary_endpoint;
    if (!have.exists || have.hash != e.hash())
      step.actions.push_back({PlannedAction::Kind::kApplyEndpoint, {}, e, "", {}, {}});
  }
  step.events.push_back({EventRecord::Type::kNormal, "StageStarted",
                         what + ": canary of " + std::to_string(c.spec.rollout.canary.replicas) +
                             " replica(s)" + (surge(c) ? "" : " taken from stable")});
  step.progressing = make(cond::kProgressing, cond::kTrue, "Deploying", what + ": deploying the canary", gen);
  step.requeue = sooner(step.requeue, std::chrono::seconds(c.spec.rollout.canary.progress_deadline_seconds));
  return step;
}

std::vector<rollout::NamedVerdict> analysis_gates(const RolloutContext& c, const api::StageStatus& stage,
                                                  bool canary_ready, bool window_elapsed,
                                                  std::vector<PlannedAction>& actions) {
  return {{std::string(rollout::kQualityGate), quality_gate(c, stage, canary_ready, actions)},
          {std::string(rollout::kPerformanceGate), performance_gate(c, stage, window_elapsed)}};
}

Step on_running(const RolloutContext& c, RolloutState& s) {
  Step step;
  api::StageStatus& stage = *s.stage;
  step.next = stage.phase;
  const rollout::Stage& s0 = c.stages.front();
  const int32_t canary_replicas = canary_size(c);
  step.stable = StableTarget{c.stable, stable_size_running(c), false};
  auto rendered = render(c, s0.to, api::Track::kCanary, canary_replicas);
  rollout::StageInputs si;
  std::optional<PodTrouble> trouble;
  if (!rendered.ok()) {
    si.verification.outcome = Outcome::kFailed;
    si.verification.reason = reason_of(rendered.error(), "InvalidStage");
    si.verification.message = rendered.error().message();
  } else {
    if (!is_applied(c.ob.canary, *rendered))
      step.actions.push_back({PlannedAction::Kind::kApplyWorkload, *rendered, {}, "", {}, {}});
    si.verification = verification_gate(c, s, c.spec.rollout.canary.replicas);
    const int ready = ready_pods(c.ob.canary, stage.revision);
    si.canary_ready = c.ob.canary.exists && c.ob.canary.template_hash == rendered->template_hash() &&
                      ready >= c.spec.rollout.canary.replicas;
    trouble = workload_trouble(c.ob.canary, stage.revision);
    si.pod_failure = unhealable(trouble);
    if (s.canary) s.canary->ready_replicas = ready;
  }
  si.deadline_passed =
      c.ctx.now - stage.started_at >= std::chrono::seconds(c.spec.rollout.canary.progress_deadline_seconds);
  if (si.canary_ready && si.verification.clears() && !stage.analysis_started_at) {
    stage.analysis_started_at = trunc(c.ctx.now);
    step.events.push_back({EventRecord::Type::kNormal, "AnalysisStarted",
                           describe(stage) + ": canary verified and ready; analysis for " +
                               std::to_string(c.spec.rollout.canary.analysis_seconds) + " s"});
  }
  si.window_elapsed =
      stage.analysis_started_at &&
      c.ctx.now - *stage.analysis_started_at >= std::chrono::seconds(c.spec.rollout.canary.analysis_seconds);
  si.analysis = analysis_gates(c, stage, si.canary_ready, si.window_elapsed, step.actions);
  si.paused = c.paused;
  si.promote_requested = !c.promote_revision.empty() && c.promote_revision == stage.revision;
  si.abort_requested = c.abort_requested;
  const rollout::Decision d = rollout::decide(si);
  const api::StageStatus previous = stage;
  stage.gate_results = {gate_result(rollout::kVerificationGate, si.verification, previous, c.ctx.now)};
  for (const auto& g : si.analysis)
    stage.gate_results.push_back(gate_result(g.gate, g.verdict, previous, c.ctx.now));
  stage.phase = stage.analysis_started_at  ? StagePhase::kAnalyzing
                : c.ob.canary.pods.empty() ? StagePhase::kDeploying
                                           : StagePhase::kVerifying;
  step.next = stage.phase;
  const std::string what = describe(stage) + " [" + s0.change + "]";
  switch (d.kind) {
    case rollout::Decision::Kind::kWait:
      wait(c, stage, si, what, step);
      if (trouble && !c.paused) say_trouble(c, *trouble, what, step);
      break;
    case rollout::Decision::Kind::kPromote:
      stage.phase = StagePhase::kPromoting;
      stage.outcome = d.reason;
      step.next = StagePhase::kPromoting;
      step.again = true;  // Promoting says what stable runs from now on
      step.events.push_back({EventRecord::Type::kNormal, "Promoting", what + ": " + d.message});
      step.requeue = sooner(step.requeue, std::chrono::milliseconds(100));
      break;
    case rollout::Decision::Kind::kRollBack: roll_back(c, s, d, si, what, step); break;
  }
  return step;
}

Step on_failed(const RolloutContext& c, RolloutState& s) {
  // autoRollback is off and a gate failed: only a person (abort, retry) or a new spec moves it on.
  Step step;
  step.next = StagePhase::kFailed;
  api::StageStatus& stage = *s.stage;
  step.stable = StableTarget{c.stable, stable_size_running(c), false};
  const std::string what = describe(stage) + " [" + c.stages.front().change + "]";
  rollout::StageInputs si;
  si.abort_requested = c.abort_requested;
  const rollout::Decision d = rollout::decide(si);
  if (d.kind == rollout::Decision::Kind::kRollBack) {
    roll_back(c, s, d, si, what, step);
    return step;
  }
  step.progressing = make(cond::kProgressing, cond::kFalse, stage.failure_reason,
                          what + " failed and autoRollback is off: " + stage.failure_message + "; annotate " +
                              std::string(api::annotations::kAbort) + " to roll back",
                          generation(c));
  return step;
}

Step on_rolling_back(const RolloutContext& c, RolloutState& s) {
  Step step;
  step.next = StagePhase::kRollingBack;
  api::StageStatus& stage = *s.stage;
  step.stable = StableTarget{c.stable, stable_size_shrinking_canary(c, 0), false};
  delete_canary(c, step, stage.revision);
  if (c.ob.canary.exists) {
    step.progressing =
        make(cond::kProgressing, cond::kTrue, "RollingBack",
             describe(stage) + ": removing the canary (" + stage.failure_reason + ")", generation(c));
    return step;
  }
  const double took = stage.failed_at ? std::max(0.0, seconds(c.ctx.now - *stage.failed_at)) : 0.0;
  step.metrics.push_back({RolloutEvent::Kind::kRollbackDuration, "", "", "", took});
  step.metrics.push_back({RolloutEvent::Kind::kStageFinished, stage.name, stage.outcome, "", 0});
  step.metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", stage.outcome, "", 0});
  history(step, c, stage.name, stage.revision, stage.outcome, stage.failure_reason, stage.failure_message);
  step.events.push_back(
      {EventRecord::Type::kNormal, "RollbackComplete",
       describe(stage) + ": canary removed " + num(took) + " s after the decision; stable untouched"});
  s.stage.reset();
  s.canary.reset();
  step.next = StagePhase::kIdle;
  step.again = true;  // say at once why no stage starts (failed revision, halted)
  return step;
}

Step on_promoting(const RolloutContext& c, RolloutState& s) {
  Step step;
  step.next = StagePhase::kPromoting;
  api::StageStatus& stage = *s.stage;
  const int64_t gen = generation(c);
  // Committed: stable rolls to the canary's configuration whatever the spec says now; the stages are
  // planned again from there.
  std::optional<api::PodConfig> to;
  if (s.canary && s.canary->config.pod_config.is_object()) {
    auto pc = api::pod_config_from_json(s.canary->config.pod_config);
    if (pc.ok()) to = *pc;
  }
  if (!to) {
    // Cannot happen with our own status; a hand-edited one loses the stage, not the stable.
    history(step, c, stage.name, stage.revision, "Superseded", "CanaryConfigLost",
            "status.canary.podConfig is unreadable");
    delete_canary(c, step, stage.revision);
    s.stage.reset();
    s.canary.reset();
    step.next = StagePhase::kIdle;
    step.again = true;
    return step;
  }
  // The promotion never holds more than stable + canary. With surge, stable's rolling update adds a
  // pod before it removes one, so the canary first gives one pod up (it serves the same configuration,
  // so serving never drops below R). Without surge, stable rolls at R - C removing a pod before it
  // adds one, then the canary hands its pods back one at a time, stable growing only into what it
  // released.
  const int32_t replicas = c.spec.replicas;
  const int32_t canary_now = c.ob.canary.exists ? c.ob.canary.replicas : 0;
  int32_t canary_target = canary_now;
  StableTarget target{*to, replicas, true};
  bool done = false;
  if (surge(c)) {
    const int32_t room = std::max(0, c.spec.rollout.canary.replicas - 1);
    canary_target = std::min(canary_now, room);
    const bool wait_for_room = holding(c.ob.canary) > room;
    if (wait_for_room) target.config = c.stable;  // stable rolls once the pod is gone
    auto full = render(c, *to, api::Track::kStable, replicas);
    done = !wait_for_room && full.ok() && runs_fully(c.ob.stable, *full);
  } else {
    target.replicas = std::max(1, replicas - holding(c.ob.canary));
    auto now = render(c, *to, api::Track::kStable, target.replicas);
    const bool rolled = now.ok() && runs_fully(c.ob.stable, *now);
    if (rolled && canary_now > 0 && target.replicas == replicas - canary_now) canary_target = canary_now - 1;
    done = rolled && target.replicas == replicas && holding(c.ob.canary) == 0;
  }
  step.stable = target;
  if (!done) {
    if (canary_target != canary_now) {
      auto canary = render(c, *to, api::Track::kCanary, canary_target);
      if (canary.ok()) {
        step.actions.push_back({PlannedAction::Kind::kApplyWorkload, *canary, {}, "", {}, {}});
      }
    }
    std::string what = describe(stage) + ": stable takes the canary's configuration";
    if (canary_now < c.spec.rollout.canary.replicas)
      what += " (the canary hands its pods over: " + std::to_string(canary_now) + " left)";
    step.progressing = make(cond::kProgressing, cond::kTrue, "Promoting", what, gen);
    return step;
  }
  const api::ReleaseConfig promoted = api::release_config(*to);
  const std::string promote_reason = stage.outcome.empty() ? "GatesPassed" : stage.outcome;
  history(step, c, stage.name, stage.revision, "Promoted", promote_reason,
          stage.name + " -> " + promoted.summary);
  step.metrics.push_back({RolloutEvent::Kind::kStageFinished, stage.name, "Promoted", "", 0});
  step.events.push_back({EventRecord::Type::kNormal, "Promoted",
                         describe(stage) + " promoted: stable serves " + promoted.summary});
  step.rolled_back = make(cond::kRolledBack, cond::kFalse, "Promoted", describe(stage) + " promoted", gen);
  delete_canary(c, step, stage.revision);
  // What remains from the new stable: nothing means the rollout is complete.
  if (rollout::plan_stages(*to, c.desired, c.spec.rollout.stage_order).empty()) {
    step.metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", "Completed", "", 0});
    step.events.push_back(
        {EventRecord::Type::kNormal, "RolloutComplete", "every stage promoted: serving " + promoted.summary});
    step.progressing = make(cond::kProgressing, cond::kFalse, "Deployed",
                            "revision " + promoted.revision + " (" + promoted.summary + ") is serving", gen);
  } else {
    step.progressing = make(cond::kProgressing, cond::kTrue, "Promoted",
                            describe(stage) + " promoted; next stage follows", gen);
    step.requeue = sooner(step.requeue, std::chrono::milliseconds(100));
  }
  step.promoted = s.canary->config;
  s.stage.reset();
  s.canary.reset();
  step.next = StagePhase::kIdle;
  return step;
}

namespace {

Step run_phase(StagePhase phase, const RolloutContext& c, RolloutState& s) {
  switch (phase) {
    case StagePhase::kIdle: return on_idle(c, s);
    case StagePhase::kDeploying:
    case StagePhase::kVerifying:
    case StagePhase::kAnalyzing: return on_running(c, s);
    case StagePhase::kPromoting: return on_promoting(c, s);
    case StagePhase::kRollingBack: return on_rolling_back(c, s);
    case StagePhase::kFailed: return on_failed(c, s);
  }
  return on_idle(c, s);
}

bool is_canary_apply(const PlannedAction& a) {
  return a.kind == PlannedAction::Kind::kApplyWorkload && a.workload.track == api::Track::kCanary;
}

void append(Step& into, Step&& from) {
  // A canary applied later in the step replaces the one an earlier phase deleted, in place.
  if (std::any_of(from.actions.begin(), from.actions.end(), is_canary_apply)) {
    std::erase_if(into.actions, [](const PlannedAction& a) {
      return a.kind == PlannedAction::Kind::kDeleteWorkload && a.name.size() > 7 &&
             a.name.compare(a.name.size() - 7, 7, "-canary") == 0;
    });
  }
  into.next = from.next;
  into.again = from.again;
  for (auto& a : from.actions) into.actions.push_back(std::move(a));
  for (auto& e : from.events) into.events.push_back(std::move(e));
  for (auto& m : from.metrics) into.metrics.push_back(std::move(m));
  for (auto& h : from.history) into.history.push_back(std::move(h));
  if (from.progressing) into.progressing = std::move(from.progressing);
  if (from.rolled_back) into.rolled_back = std::move(from.rolled_back);
  if (from.capacity) into.capacity = std::move(from.capacity);
  if (from.stable) into.stable = std::move(from.stable);
  if (from.promoted) into.promoted = std::move(from.promoted);
  into.requeue = into.requeue.merge(from.requeue);
}

}  // namespace

Step run_machine(const RolloutContext& c, RolloutState& s) {
  Step out;
  out.next = s.phase();
  if (auto sup = supersede(c, s)) append(out, std::move(*sup));
  // Each phase runs at most once per reconcile: a chain Superseded -> Idle or RollingBack -> Idle
  // ends there, and no loop is possible.
  std::vector<StagePhase> ran;
  for (StagePhase p = s.phase(); std::find(ran.begin(), ran.end(), p) == ran.end(); p = s.phase()) {
    ran.push_back(p);
    Step step = run_phase(p, c, s);
    const bool again = step.again;
    append(out, std::move(step));
    if (!again) break;
  }
  out.again = false;
  return out;
}

}  // namespace infergate::op::controllers
