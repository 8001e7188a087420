// The staged rollout plan: stages, gates, promotion, rollback, manual control. Pure.
#include "infergate/operator/controllers/rollout_plan.h"

#include <algorithm>
#include <cstdio>

#include "infergate/operator/api/conditions.h"

namespace infergate::op::controllers {
namespace {

namespace cond = api::condition;
using platform::EventRecord;
using rollout::GateVerdict;
using rollout::Outcome;

api::Condition make(std::string_view type, std::string_view status, std::string reason, std::string message,
                    int64_t generation) {
  return api::Condition{std::string(type),  std::string(status), std::move(reason),
                        std::move(message), generation,          {}};
}

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

// "ttft_p95_ratio 2.1 (max 1.5), error_rate 0 (max 0.05)": a gate's numbers for conditions and events.
std::string numbers(const GateVerdict& v) {
  std::string s;
  for (const auto& [k, t] : v.thresholds) {
    auto m = v.measurements.find(k);
    s += (s.empty() ? "" : ", ") + k + " " + (m == v.measurements.end() ? "n/a" : num(m->second)) +
         " (limit " + num(t) + ")";
  }
  return s;
}

api::GateResult gate_result(std::string_view gate, const GateVerdict& v, const api::StageStatus* previous,
                            WallTime now) {
  api::GateResult r;
  r.gate = std::string(gate);
  r.outcome = std::string(rollout::to_string(v.outcome));
  r.message = v.message;
  r.measurements = v.measurements;
  r.thresholds = v.thresholds;
  r.at = trunc(now);
  if (previous) {  // unchanged results keep their time: reconciling an unchanged stage writes nothing
    for (const auto& p : previous->gate_results) {
      if (p.gate == r.gate && p.outcome == r.outcome && p.message == r.message) r.at = p.at;
    }
  }
  return r;
}

struct CanaryView {
  int ready = 0;
  std::string runtime_failure;
};

CanaryView view(const platform::WorkloadState& w, const std::string& revision) {
  CanaryView v;
  for (const auto& p : w.pods) {
    if (p.deleting || p.revision != revision) continue;
    if (p.ready) ++v.ready;
    if (v.runtime_failure.empty() && (p.waiting_reason == "CrashLoopBackOff" || p.restarts >= 3)) {
      v.runtime_failure = "pod " + p.name + ": " +
                          (p.waiting_reason.empty() ? "restarted" : p.waiting_reason) +
                          (p.message.empty() ? "" : ": " + p.message.substr(0, 512));
    }
  }
  return v;
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

}  // namespace

std::optional<api::PodConfig> stable_config(const ModelInput& in) {
  if (!in.status.stable) return std::nullopt;
  if (in.status.stable->pod_config.is_object()) {
    auto pc = api::pod_config_from_json(in.status.stable->pod_config);
    if (pc.ok()) return *pc;
  }
  // A status written before podConfig existed: only a stable that is the spec can be rendered again.
  if (in.spec && in.status.stable->revision == api::revision(api::pod_config(*in.spec)))
    return api::pod_config(*in.spec);
  return std::nullopt;
}

std::optional<rollout::Stage> next_stage(const ModelInput& in) {
  if (!in.spec) return std::nullopt;
  auto stable = stable_config(in);
  if (!stable) return std::nullopt;
  auto stages = rollout::plan_stages(*stable, api::pod_config(*in.spec), in.spec->rollout.stage_order);
  if (stages.empty()) return std::nullopt;
  return stages.front();
}

Plan plan_model(const ModelInput& in, const Observed& ob, const PlanContext& ctx) {
  if (!in.spec || (ob.trust && *ob.trust == platform::TrustState::kMissing))
    return plan_steady_state(in, ob, ctx);
  const std::optional<api::PodConfig> stable_pc = stable_config(in);
  if (!stable_pc) {
    // The first deployment: nothing serves, so there is nothing to canary against.
    Plan p = plan_steady_state(in, ob, ctx);
    if (ob.canary.exists)
      p.actions.push_back({PlannedAction::Kind::kDeleteWorkload,
                           {},
                           {},
                           api::workload_name(in.meta.name, api::Track::kCanary),
                           {}});
    return p;
  }

  const api::InferenceModelSpec& spec = *in.spec;
  const std::string& name = in.meta.name;
  const int64_t gen = in.meta.generation;
  const WallTime now = ctx.now;
  const api::PodConfig desired = api::pod_config(spec);
  const std::string desired_rev = api::revision(desired);
  const std::string canary_name = api::workload_name(name, api::Track::kCanary);
  const int32_t canary_replicas = spec.rollout.canary.replicas;
  const std::vector<rollout::Stage> stages =
      rollout::plan_stages(*stable_pc, desired, spec.rollout.stage_order);

  std::optional<api::StageStatus> stage = in.status.stage;
  std::optional<api::CanaryStatus> canary = in.status.canary;
  std::vector<std::string> failed = in.status.failed_revisions;
  api::RolloutControlStatus control = in.status.control;
  std::vector<PlannedAction> actions;
  std::vector<EventRecord> events;
  std::vector<RolloutEvent> metrics;
  std::vector<api::HistoryEntry> history;
  reconcile::Action next = reconcile::Action::await_change();
  api::PodConfig stable_target = *stable_pc;
  int32_t stable_replicas = spec.replicas;
  std::optional<api::Condition> progressing;  // overrides the steady state's when set
  std::optional<api::Condition> rolled_back;
  std::optional<api::Condition> capacity;
  bool promoted_now = false;
  std::string promote_reason;

  auto add_history = [&](const std::string& stage_name, const std::string& rev, const std::string& outcome,
                         const std::string& reason, const std::string& message) {
    history.push_back(
        api::HistoryEntry{stage_name, rev, outcome, reason, message.substr(0, 1024), trunc(now)});
  };
  bool canary_deleted = false, job_deleted = false;
  auto delete_canary = [&](const std::string& revision) {
    if (ob.canary.exists && !canary_deleted) {
      actions.push_back({PlannedAction::Kind::kDeleteWorkload, {}, {}, canary_name, {}});
      canary_deleted = true;
    }
    if (!revision.empty() && ob.quality_job && ob.quality_job->exists && !job_deleted) {
      actions.push_back({PlannedAction::Kind::kDeleteJob, {}, {}, api::quality_job_name(name, revision), {}});
      job_deleted = true;
    }
  };
  auto describe_stage = [&](const api::StageStatus& s) {
    return "stage " + s.name + " (revision " + s.revision + ")";
  };

  // ---- Manual control and the memory of failures ----
  if (!control.failed_for.empty() && control.failed_for != desired_rev) {
    failed.clear();  // the spec changed: failed revisions may be tried again
    control.failed_for.clear();
    control.halted = false;
  }
  bool abort_requested = false;
  if (std::string t = annotation(in, api::annotations::kAbort); !t.empty() && t != control.abort_token) {
    control.abort_token = t;
    abort_requested = true;
    control.halted = true;
    control.failed_for = desired_rev;
    events.push_back({EventRecord::Type::kWarning, "AbortRequested",
                      "rollout aborted by annotation " + std::string(api::annotations::kAbort) + "=" + t});
  }
  bool retried = false;
  if (std::string t = annotation(in, api::annotations::kRetry); !t.empty() && t != control.retry_token) {
    control.retry_token = t;
    failed.clear();
    control.halted = false;
    control.failed_for.clear();
    retried = true;
    events.push_back({EventRecord::Type::kNormal, "RetryRequested",
                      "rollout restarts by annotation " + std::string(api::annotations::kRetry) + "=" + t});
  }
  const bool paused = annotation(in, api::annotations::kPaused) == "true";
  const std::string promote_rev = annotation(in, api::annotations::kPromote);

  // ---- A stage in flight ----
  if (stage) {
    const std::string rev = stage->revision;
    const bool current = !stages.empty() && stages.front().revision == rev;
    if (stage->phase == "RollingBack") {
      delete_canary(rev);
      if (!ob.canary.exists) {
        const double took = stage->failed_at ? std::max(0.0, seconds(now - *stage->failed_at)) : 0.0;
        metrics.push_back({RolloutEvent::Kind::kRollbackDuration, "", "", "", took});
        metrics.push_back({RolloutEvent::Kind::kStageFinished, stage->name, stage->outcome, "", 0});
        metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", stage->outcome, "", 0});
        add_history(stage->name, rev, stage->outcome, stage->failure_reason, stage->failure_message);
        events.push_back({EventRecord::Type::kNormal, "RollbackComplete",
                          describe_stage(*stage) + ": canary removed " + num(took) +
                              " s after the decision; stable untouched"});
        stage.reset();
        canary.reset();
      } else {
        progressing =
            make(cond::kProgressing, cond::kTrue, "RollingBack",
                 describe_stage(*stage) + ": removing the canary (" + stage->failure_reason + ")", gen);
      }
    } else if (stage->phase == "Promoting") {
      // Committed: stable rolls to the canary's configuration whatever the spec says now; the stages
      // are planned again from there.
      std::optional<api::PodConfig> to;
      if (canary && canary->config.pod_config.is_object()) {
        auto pc = api::pod_config_from_json(canary->config.pod_config);
        if (pc.ok()) to = *pc;
      }
      if (to) {
        stable_target = *to;
        stable_replicas = spec.replicas;
        promote_reason = stage->outcome.empty() ? "GatesPassed" : stage->outcome;
        progressing = make(cond::kProgressing, cond::kTrue, "Promoting",
                           describe_stage(*stage) + ": stable takes the canary's configuration", gen);
      } else {
        // Cannot happen with our own status; a hand-edited one loses the stage, not the stable.
        add_history(stage->name, rev, "Superseded", "CanaryConfigLost",
                    "status.canary.podConfig is unreadable");
        delete_canary(rev);
        stage.reset();
        canary.reset();
      }
    } else if (!current || (retried && stage->phase == "Failed")) {
      const std::string why =
          !current ? "the spec changed (generation " + std::to_string(gen) + ")" : "retry";
      add_history(stage->name, rev, "Superseded", !current ? "SpecChanged" : "Retried",
                  describe_stage(*stage) + " superseded: " + why);
      metrics.push_back({RolloutEvent::Kind::kStageFinished, stage->name, "Superseded", "", 0});
      metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", "Superseded", "", 0});
      events.push_back(
          {EventRecord::Type::kNormal, "Superseded", describe_stage(*stage) + " superseded: " + why});
      if (ob.quality_job && ob.quality_job->exists) {
        actions.push_back({PlannedAction::Kind::kDeleteJob, {}, {}, api::quality_job_name(name, rev), {}});
        job_deleted = true;
      }
      // The canary itself is replaced in place if a new stage starts below, else deleted there.
      stage.reset();
      canary.reset();
    } else {
      // Deploying, Verifying, Analyzing, Failed: run the gates.
      const rollout::Stage& s0 = stages.front();
      auto rendered = render_workload(name, s0.to, api::Track::kCanary, canary_replicas, ctx);
      if (!spec.rollout.canary.surge) stable_replicas = std::max(1, spec.replicas - canary_replicas);
      rollout::StageInputs si;
      std::string hash;
      if (!rendered.ok()) {
        si.verification.outcome = Outcome::kFailed;
        si.verification.reason =
            rendered.error().reason().empty() ? "InvalidStage" : rendered.error().reason();
        si.verification.message = rendered.error().message();
      } else {
        hash = rendered->template_hash();
        if (stage->phase != "Failed" &&
            (!ob.canary.exists || ob.canary.template_hash != hash || ob.canary.replicas != canary_replicas)) {
          actions.push_back({PlannedAction::Kind::kApplyWorkload, *rendered, {}, "", {}});
        }
        // Verification: the agent's verdicts in the canary's pods.
        const PodVerdicts verdicts = verification_from_pods(ob.canary, rev);
        if (!verdicts.refused.empty()) {
          const auto& [pod, r] = verdicts.refused.front();
          si.verification.outcome = Outcome::kFailed;
          si.verification.reason = r.reason;
          si.verification.message =
              r.describe() + " (pod " + pod + ", agent exit code " + std::to_string(r.exit_code) + ")";
        } else if (static_cast<int32_t>(verdicts.verified.size()) >= canary_replicas) {
          const auto& r = verdicts.verified.front().second;
          si.verification.outcome = Outcome::kPassed;
          si.verification.reason = "Verified";
          si.verification.message = "release " + r.release_digest + " verified on " +
                                    std::to_string(verdicts.verified.size()) + " canary pod(s)";
          if (canary) {
            canary->config.release_digest = r.release_digest;
            canary->config.release_version = r.version;
          }
        } else {
          si.verification.outcome = Outcome::kPending;
          si.verification.reason = "AwaitingVerification";
          si.verification.message = std::to_string(verdicts.verified.size()) + "/" +
                                    std::to_string(canary_replicas) + " canary pods verified";
        }
        const CanaryView cv = view(ob.canary, rev);
        si.canary_ready = ob.canary.exists && ob.canary.template_hash == hash && cv.ready >= canary_replicas;
        si.runtime_failure = cv.runtime_failure;
        if (canary) canary->ready_replicas = cv.ready;
      }
      si.deadline_passed =
          now - stage->started_at >= std::chrono::seconds(spec.rollout.canary.progress_deadline_seconds);
      if (si.canary_ready && si.verification.clears() && !stage->analysis_started_at &&
          stage->phase != "Failed") {
        stage->analysis_started_at = trunc(now);
        events.push_back({EventRecord::Type::kNormal, "AnalysisStarted",
                          describe_stage(*stage) + ": canary verified and ready; analysis for " +
                              std::to_string(spec.rollout.canary.analysis_seconds) + " s"});
      }
      const bool analyzing = stage->analysis_started_at.has_value();
      const auto window = std::chrono::seconds(spec.rollout.canary.analysis_seconds);
      si.window_elapsed = analyzing && now - *stage->analysis_started_at >= window;
      // Quality: an eval Job against the two tracks' endpoints.
      if (!rollout::quality_configured(spec.rollout.quality)) {
        si.quality.outcome = Outcome::kSkipped;
        si.quality.reason = "NotConfigured";
        si.quality.message = "no thresholds in spec.rollout.gates.quality";
      } else if (!analyzing) {
        si.quality.outcome = Outcome::kPending;
        si.quality.reason = "AwaitingCanary";
        si.quality.message = "runs once the canary is verified and ready";
      } else {
        platform::JobState job = ob.quality_job.value_or(platform::JobState{});
        // A check starts only against a serving canary and endpoints with addresses (after an
        // operator restart the local platform's pods and endpoints come back a moment later).
        if (!job.exists && stage->phase != "Failed" && si.canary_ready && !ob.stable_endpoint.url.empty() &&
            !ob.canary_endpoint.url.empty()) {
          platform::JobSpec js;
          js.name = api::quality_job_name(name, rev);
          js.labels = model_labels(name, api::Track::kCanary);
          js.labels[std::string(api::labels::kRevision)] = rev;
          js.container =
              rollout::eval_command(spec.rollout.quality, ob.stable_endpoint.url, ob.canary_endpoint.url,
                                    ctx.images.runtime, ctx.layout.termination_log);
          js.deadline_seconds = spec.rollout.quality.timeout_seconds;
          actions.push_back({PlannedAction::Kind::kApplyJob, {}, {}, "", js});
        }
        si.quality = rollout::evaluate_quality_job(spec.rollout.quality, job, now);
      }
      // Performance: measured by the controller once the window is over.
      if (!rollout::performance_configured(spec.rollout.performance)) {
        si.performance.outcome = Outcome::kSkipped;
        si.performance.reason = "NotConfigured";
        si.performance.message = "no thresholds in spec.rollout.gates.performance";
      } else if (!si.window_elapsed) {
        si.performance.outcome = Outcome::kPending;
        si.performance.reason = "AnalysisWindow";
        si.performance.message = analyzing
                                     ? "analysis window of " + std::to_string(window.count()) + " s running"
                                     : "starts once the canary is verified and ready";
      } else if (ob.performance) {
        si.performance = *ob.performance;
      } else {
        si.performance.outcome = Outcome::kPending;
        si.performance.reason = "Measuring";
        si.performance.message = "measuring the analysis window";
      }
      si.paused = paused;
      si.promote_requested = !promote_rev.empty() && promote_rev == rev;
      si.abort_requested = abort_requested;
      if (stage->phase == "Failed") {
        // autoRollback is off and a gate failed: only a person (abort) or a new spec moves it on.
        si = rollout::StageInputs{};
        si.abort_requested = abort_requested;
      }
      const rollout::Decision d = rollout::decide(si);
      const api::StageStatus previous = *stage;
      if (stage->phase != "Failed") {
        stage->gate_results = {gate_result(rollout::kVerificationGate, si.verification, &previous, now),
                               gate_result(rollout::kQualityGate, si.quality, &previous, now),
                               gate_result(rollout::kPerformanceGate, si.performance, &previous, now)};
        stage->phase = analyzing ? "Analyzing" : (ob.canary.pods.empty() ? "Deploying" : "Verifying");
      }
      const std::string what = describe_stage(*stage) + " [" + s0.change + "]";
      switch (d.kind) {
        case rollout::Decision::Kind::kWait: {
          if (stage->phase == "Failed") {
            progressing = make(cond::kProgressing, cond::kFalse, stage->failure_reason,
                               what + " failed and autoRollback is off: " + stage->failure_message +
                                   "; annotate " + std::string(api::annotations::kAbort) + " to roll back",
                               gen);
            break;
          }
          std::string detail = stage->phase == "Analyzing"   ? "analyzing"
                               : stage->phase == "Verifying" ? "verifying the canary"
                                                             : "deploying the canary";
          if (paused) detail += " (paused)";
          progressing = make(cond::kProgressing, cond::kTrue, paused ? "Paused" : stage->phase,
                             what + ": " + detail, gen);
          if (!si.canary_ready) {
            next =
                sooner(next, stage->started_at +
                                 std::chrono::seconds(spec.rollout.canary.progress_deadline_seconds) - now);
          }
          if (analyzing && !si.window_elapsed)
            next = sooner(next, *stage->analysis_started_at + window - now);
          if (si.window_elapsed && si.performance.outcome == Outcome::kPending)
            next = sooner(next, std::chrono::seconds(1));
          if (si.quality.outcome == Outcome::kPending && analyzing)
            next = sooner(next, std::chrono::seconds(5));
          break;
        }
        case rollout::Decision::Kind::kPromote: {
          stage->phase = "Promoting";
          stage->outcome = d.reason;
          stable_target = s0.to;
          stable_replicas = spec.replicas;
          promote_reason = d.reason;
          progressing = make(cond::kProgressing, cond::kTrue, "Promoting", what + ": " + d.message, gen);
          events.push_back({EventRecord::Type::kNormal, "Promoting", what + ": " + d.message});
          next = sooner(next, std::chrono::milliseconds(100));
          break;
        }
        case rollout::Decision::Kind::kRollBack: {
          const GateVerdict* gv = d.gate == rollout::kQualityGate       ? &si.quality
                                  : d.gate == rollout::kPerformanceGate ? &si.performance
                                                                        : nullptr;
          std::string msg = d.gate + " gate: " + d.message;
          if (gv && !gv->thresholds.empty()) msg += " [" + numbers(*gv) + "]";
          stage->failed_at = trunc(now);
          stage->failure_reason = d.reason;
          stage->failure_message = msg.substr(0, 2048);
          if (d.gate == rollout::kVerificationGate && !d.aborted)
            metrics.push_back({RolloutEvent::Kind::kVerificationFailure, "", "", d.reason, 0});
          if (!spec.rollout.auto_rollback && !d.aborted) {
            if (stage->phase != "Failed") {
              stage->phase = "Failed";
              events.push_back(
                  {EventRecord::Type::kWarning, "GateFailed", what + ": " + msg + " (autoRollback is off)"});
            }
            progressing = make(cond::kProgressing, cond::kFalse, d.reason,
                               what + " failed and autoRollback is off: " + msg, gen);
            break;
          }
          stage->phase = "RollingBack";
          stage->outcome = d.aborted ? "Aborted" : "RolledBack";
          stable_replicas = spec.replicas;
          delete_canary(rev);
          control.failed_for = desired_rev;
          if (d.aborted) {
            control.halted = true;
            events.push_back({EventRecord::Type::kWarning, "Aborted",
                              what + ": aborted; the canary goes away, stable is untouched"});
          } else {
            if (!contains(failed, rev)) failed.push_back(rev);
            rolled_back = make(cond::kRolledBack, cond::kTrue, d.reason, what + " rolled back: " + msg, gen);
            events.push_back({EventRecord::Type::kWarning, "RolledBack", what + " rolled back: " + msg});
          }
          progressing = make(cond::kProgressing, cond::kTrue, "RollingBack",
                             what + ": removing the canary (" + d.reason + ")", gen);
          break;
        }
      }
    }
  }

  // ---- Start the next stage ----
  // Whether stable serves its configuration fully (a stage starts only from a healthy stable).
  auto stable_rendered = render_workload(name, *stable_pc, api::Track::kStable, spec.replicas, ctx);
  const bool stable_healthy = stable_rendered.ok() && ob.stable.exists && ob.stable.observed_current &&
                              ob.stable.template_hash == stable_rendered->template_hash() &&
                              ob.stable.replicas == spec.replicas &&
                              ob.stable.ready_replicas >= spec.replicas;
  if (!stage && !stages.empty()) {
    const rollout::Stage& s0 = stages.front();
    const std::string what = "stage " + std::string(api::to_string(s0.name)) + " (revision " + s0.revision +
                             ") [" + s0.change + "]";
    if (abort_requested || control.halted) {
      progressing = make(cond::kProgressing, cond::kFalse, "Aborted",
                         "the rollout was aborted before " + what + "; annotate " +
                             std::string(api::annotations::kRetry) +
                             " with a new value (or change the spec) to start again",
                         gen);
      if (ob.canary.exists) delete_canary("");
    } else if (contains(failed, s0.revision)) {
      progressing =
          make(cond::kProgressing, cond::kFalse, "RevisionFailed",
               what +
                   " failed before (see the RolledBack condition) and is not retried until the spec "
                   "changes or " +
                   std::string(api::annotations::kRetry) + " is set",
               gen);
      if (ob.canary.exists) delete_canary("");
    } else if (paused) {
      progressing = make(cond::kProgressing, cond::kFalse, "Paused", what + " waits: rollout paused", gen);
    } else if (!stable_healthy) {
      progressing =
          make(cond::kProgressing, cond::kTrue, "WaitingForStable",
               what + " starts once stable serves all " + std::to_string(spec.replicas) + " replicas", gen);
    } else if (ob.stage_capacity && ob.stage_capacity->blocks()) {
      capacity = make(cond::kCapacityFits, cond::kFalse, ob.stage_capacity->reason,
                      what + ": " + ob.stage_capacity->message, gen);
      progressing = make(cond::kProgressing, cond::kFalse, ob.stage_capacity->reason,
                         what + " does not fit: " + ob.stage_capacity->message, gen);
    } else if (auto rendered = render_workload(name, s0.to, api::Track::kCanary, canary_replicas, ctx);
               !rendered.ok()) {
      progressing = make(cond::kProgressing, cond::kFalse,
                         rendered.error().reason().empty() ? "InvalidStage" : rendered.error().reason(),
                         what + " cannot run: " + rendered.error().message(), gen);
    } else {
      if (ob.stage_capacity) {
        // True (it fits), or Unknown (not checked: said, and not blocking).
        capacity = make(cond::kCapacityFits, ob.stage_capacity->condition_status(), ob.stage_capacity->reason,
                        what + ": " + ob.stage_capacity->message, gen);
      }
      api::StageStatus ns;
      ns.name = std::string(api::to_string(s0.name));
      ns.revision = s0.revision;
      ns.phase = "Deploying";
      ns.started_at = trunc(now);
      ns.from_revision = api::revision(*stable_pc);
      stage = ns;
      api::CanaryStatus cs;
      cs.config = api::release_config(s0.to);
      cs.workload = canary_name;
      cs.replicas = canary_replicas;
      canary = cs;
      if (!spec.rollout.canary.surge) stable_replicas = std::max(1, spec.replicas - canary_replicas);
      actions.push_back({PlannedAction::Kind::kApplyWorkload, *rendered, {}, "", {}});
      for (api::Track t : {api::Track::kStable, api::Track::kCanary}) {
        platform::EndpointSpec e = track_endpoint(name, t);
        const platform::EndpointState& have =
            t == api::Track::kStable ? ob.stable_endpoint : ob.canary_endpoint;
        if (!have.exists || have.hash != e.hash())
          actions.push_back({PlannedAction::Kind::kApplyEndpoint, {}, e, "", {}});
      }
      events.push_back({EventRecord::Type::kNormal, "StageStarted",
                        what + ": canary of " + std::to_string(canary_replicas) + " replica(s)" +
                            (spec.rollout.canary.surge ? "" : " taken from stable")});
      progressing = make(cond::kProgressing, cond::kTrue, "Deploying", what + ": deploying the canary", gen);
      next = sooner(next, std::chrono::seconds(spec.rollout.canary.progress_deadline_seconds));
    }
  } else if (!stage && stages.empty() && ob.canary.exists) {
    delete_canary("");  // a leftover (the spec went back to what serves)
  }
  if (!stage && stages.empty() && ob.serving_capacity) {
    // Nothing to roll out: say whether what serves fits the hardware the spec now names. It already
    // runs, so a False here warns (an Event) but blocks nothing. The message is the one the first
    // deployment's check wrote for the same configuration, so an unchanged model writes nothing.
    capacity = make(cond::kCapacityFits, ob.serving_capacity->condition_status(), ob.serving_capacity->reason,
                    ob.serving_capacity->message, gen);
  }

  // ---- The stable workload, through the steady state ----
  Observed ob2 = ob;
  ob2.capacity.reset();  // stages are capacity-checked above, before they start
  StableTarget target{stable_target, stable_replicas};
  Plan plan = plan_steady_state(in, ob2, ctx, &target);
  api::InferenceModelStatus& st = plan.status;

  // Promotion completes when stable fully runs the canary's configuration.
  if (stage && stage->phase == "Promoting" && st.stable && st.stable->revision == stage->revision) {
    if (!st.history.empty() && st.history.back().revision == stage->revision &&
        st.history.back().outcome == "Deployed") {
      st.history.pop_back();  // the steady state's "Deployed": this is a promotion
    }
    if (canary && st.stable->release_digest.empty()) {
      st.stable->release_digest = canary->config.release_digest;
      st.stable->release_version = canary->config.release_version;
    }
    add_history(stage->name, stage->revision, "Promoted", promote_reason,
                stage->name + " -> " + st.stable->summary);
    metrics.push_back({RolloutEvent::Kind::kStageFinished, stage->name, "Promoted", "", 0});
    events.push_back({EventRecord::Type::kNormal, "Promoted",
                      describe_stage(*stage) + " promoted: stable serves " + st.stable->summary});
    rolled_back =
        make(cond::kRolledBack, cond::kFalse, "Promoted", describe_stage(*stage) + " promoted", gen);
    delete_canary(stage->revision);
    // What remains from the new stable: nothing means the rollout is complete.
    auto promoted_pc = api::pod_config_from_json(st.stable->pod_config);
    if (promoted_pc.ok() && rollout::plan_stages(*promoted_pc, desired, spec.rollout.stage_order).empty()) {
      metrics.push_back({RolloutEvent::Kind::kRolloutFinished, "", "Completed", "", 0});
      events.push_back({EventRecord::Type::kNormal, "RolloutComplete",
                        "every stage promoted: serving " + st.stable->summary});
      progressing = make(cond::kProgressing, cond::kFalse, "Deployed",
                         "revision " + st.stable->revision + " (" + st.stable->summary + ") is serving", gen);
    } else {
      progressing = make(cond::kProgressing, cond::kTrue, "Promoted",
                         describe_stage(*stage) + " promoted; next stage follows", gen);
      next = sooner(next, std::chrono::milliseconds(100));
    }
    stage.reset();
    canary.reset();
    promoted_now = true;
  }
  (void)promoted_now;

  // ---- Overlay the rollout on the steady state's status ----
  st.stage = stage;
  if (canary && stage) canary->replicas = canary_replicas;
  st.canary = stage ? canary : std::nullopt;
  st.failed_revisions = failed;
  st.control = control;
  for (auto& h : history) {
    st.history.push_back(std::move(h));
    if (st.history.size() > api::kMaxHistory) st.history.erase(st.history.begin());
  }
  // CapacityFits: the steady state drops it when not checked; keep the last stage check instead.
  if (const api::Condition* prevc = api::find_condition(in.status.conditions, cond::kCapacityFits);
      prevc && !api::find_condition(st.conditions, cond::kCapacityFits)) {
    st.conditions.push_back(*prevc);
  }
  auto flip_event = [&](const api::Condition& c) {
    const api::Condition* prev = api::find_condition(in.status.conditions, c.type);
    return !prev || prev->status != c.status || prev->reason != c.reason;
  };
  if (capacity) {
    if (flip_event(*capacity) && capacity->status == cond::kFalse)
      events.push_back({EventRecord::Type::kWarning, capacity->reason, capacity->message});
    api::set_condition(st.conditions, *capacity, now);
  }
  if (rolled_back) api::set_condition(st.conditions, *rolled_back, now);
  if (progressing) {
    // Progressing keeps the steady state's verdict while stable itself is still rolling or failing.
    const api::Condition* mine = api::find_condition(st.conditions, cond::kProgressing);
    const bool stable_busy = mine && mine->status == cond::kTrue && mine->reason == "Deploying" && !stage;
    const bool stable_failing = mine && mine->reason == "VerificationFailed";
    if (!stable_failing && !(stable_busy && progressing->reason == "WaitingForStable")) {
      api::set_condition(st.conditions, *progressing, now);
    }
  }
  if (const auto* v = api::find_condition(st.conditions, cond::kVerified); v && v->status == cond::kFalse) {
    const auto* pv = api::find_condition(in.status.conditions, cond::kVerified);
    if (!pv || pv->status != cond::kFalse || pv->reason != v->reason)
      metrics.push_back({RolloutEvent::Kind::kVerificationFailure, "", "", v->reason, 0});
  }
  // Version drift: stable pods whose verified release is not the one stable should serve.
  if (st.stable && !st.stable->release_digest.empty()) {
    int drift = 0;
    for (const auto& p : ob.stable.pods) {
      if (p.deleting || p.verify.phase != platform::VerifyState::Phase::kSucceeded) continue;
      api::VerificationReport r =
          api::parse_termination_message(p.verify.termination_message, p.verify.exit_code);
      if (r.verified && r.release_digest != st.stable->release_digest) ++drift;
    }
    plan.version_drift = drift;
  }

  // Rollout actions after the stable's (a canary that takes stable's pods scales stable down first).
  for (auto& a : actions) plan.actions.push_back(std::move(a));
  for (auto& e : events) plan.events.push_back(std::move(e));
  plan.rollout_events = std::move(metrics);
  plan.next = plan.next.merge(next);
  return plan;
}

}  // namespace infergate::op::controllers
