// The InferenceModel reconciler: I/O around the pure steady-state plan.
#include "infergate/operator/controllers/inference_model_controller.h"

#include "infergate/common/log.h"
#include "infergate/operator/api/conditions.h"

namespace infergate::op::controllers {
namespace {

bool transient(const Error& e) {
  return e.code() == ErrorCode::kUnavailable || e.code() == ErrorCode::kDeadlineExceeded ||
         e.code() == ErrorCode::kResourceExhausted || e.code() == ErrorCode::kConflict ||
         e.code() == ErrorCode::kCancelled || e.code() == ErrorCode::kFailedPrecondition ||
         e.code() == ErrorCode::kInternal;
}

// The object's status as written ({} when it has none).
Json status_of(const Json& object) {
  auto it = object.find("status");
  return it != object.end() && it->is_object() ? *it : Json::object();
}

}  // namespace

InferenceModelReconciler::InferenceModelReconciler(platform::ModelStore& models, platform::Platform& platform,
                                                   platform::EventSink& events, CapacityChecker& capacity,
                                                   Clock& clock, ControllerOptions options)
    : models_(models),
      platform_(platform),
      events_(events),
      capacity_(capacity),
      clock_(clock),
      options_(std::move(options)),
      analyzer_(platform, clock, options_.scrape_timeout) {}

Result<Observed> InferenceModelReconciler::observe(const ModelInput& in) {
  const platform::ModelRef ref = model_ref(in.meta);
  Observed ob;
  const WallTime now = clock_.wall_now();
  INFERGATE_ASSIGN_OR_RETURN(
      ob.stable, platform_.observe_workload(ref, api::workload_name(in.meta.name, api::Track::kStable)));
  restarts_.observe(ref.key(), ob.stable, now);
  INFERGATE_ASSIGN_OR_RETURN(ob.endpoint, platform_.observe_endpoint(ref, api::endpoint_name(in.meta.name)));
  INFERGATE_ASSIGN_OR_RETURN(ob.disruption_budget, platform_.observe_disruption_budget(ref, in.meta.name));
  if (in.spec) {
    INFERGATE_ASSIGN_OR_RETURN(platform::TrustState trust,
                               platform_.check_trust(ref, in.spec->artifact.trust));
    ob.trust = trust;
    if (!in.status.stable)
      ob.capacity = capacity_.check(api::pod_config(*in.spec), in.spec->capacity_planning, in.spec->replicas);
    const std::string& name = in.meta.name;
    INFERGATE_ASSIGN_OR_RETURN(
        ob.canary, platform_.observe_workload(ref, api::workload_name(name, api::Track::kCanary)));
    restarts_.observe(ref.key(), ob.canary, now);
    INFERGATE_ASSIGN_OR_RETURN(
        ob.stable_endpoint,
        platform_.observe_endpoint(ref, api::track_endpoint_name(name, api::Track::kStable)));
    INFERGATE_ASSIGN_OR_RETURN(
        ob.canary_endpoint,
        platform_.observe_endpoint(ref, api::track_endpoint_name(name, api::Track::kCanary)));
    if (const auto& stage = in.status.stage) {
      INFERGATE_ASSIGN_OR_RETURN(platform::JobState job,
                                 platform_.observe_job(ref, api::quality_job_name(name, stage->revision)));
      ob.quality_job = job;
      const bool running = stage->phase == api::StagePhase::kDeploying ||
                           stage->phase == api::StagePhase::kVerifying ||
                           stage->phase == api::StagePhase::kAnalyzing;
      if (running && rollout::performance_configured(in.spec->rollout.performance)) {
        ob.performance = analyzer_.measure(ref, *in.spec, *stage, ob.stable, ob.canary);
      }
    } else if (auto next = next_stage(in, options_.images)) {
      // The capacity planner re-plans with the next stage's settings before it starts.
      ob.stage_capacity = capacity_.check(next->to, in.spec->capacity_planning, in.spec->replicas);
    } else if (in.status.stable) {
      ob.serving_capacity =
          capacity_.check(api::pod_config(*in.spec), in.spec->capacity_planning, in.spec->replicas);
    }
  }
  return ob;
}

Status InferenceModelReconciler::execute(const platform::ModelRef& ref, const Plan& plan) {
  for (const auto& a : plan.actions) {
    Status st;
    std::string what;
    switch (a.kind) {
      case PlannedAction::Kind::kApplyWorkload:
        st = platform_.apply_workload(ref, a.workload);
        what = "applying workload " + a.workload.name;
        break;
      case PlannedAction::Kind::kApplyEndpoint:
        st = platform_.apply_endpoint(ref, a.endpoint);
        what = "applying endpoint " + a.endpoint.name;
        break;
      case PlannedAction::Kind::kDeleteWorkload:
        st = platform_.delete_workload(ref, a.name);
        what = "deleting workload " + a.name;
        break;
      case PlannedAction::Kind::kApplyJob:
        st = platform_.apply_job(ref, a.job);
        what = "starting job " + a.job.name;
        break;
      case PlannedAction::Kind::kDeleteJob:
        st = platform_.delete_job(ref, a.name);
        what = "deleting job " + a.name;
        break;
      case PlannedAction::Kind::kApplyDisruptionBudget:
        st = platform_.apply_disruption_budget(ref, a.budget);
        what = "applying the disruption budget " + a.budget.name;
        break;
    }
    if (!st.ok()) return std::move(st).error().context(what);
  }
  return ok_status();
}

Result<Plan> InferenceModelReconciler::plan(const Json& object) {
  INFERGATE_ASSIGN_OR_RETURN(ModelInput in, read_model(object));
  INFERGATE_ASSIGN_OR_RETURN(Observed ob, observe(in));
  PlanContext ctx{clock_.wall_now(), options_.images, platform_.layout(), options_.trust_recheck};
  return plan_model(in, ob, ctx);
}

Result<reconcile::Action> InferenceModelReconciler::reconcile(const reconcile::Request& req) {
  INFERGATE_ASSIGN_OR_RETURN(std::optional<Json> object, models_.get(req.namespace_, req.name));
  if (!object) {
    // Deleted: owned workloads go with it (the platform's garbage collection, and this).
    INFERGATE_RETURN_IF_ERROR(platform_.cleanup(platform::ModelRef{req.namespace_, req.name, ""}));
    analyzer_.forget(req.key());
    restarts_.forget(req.key());
    if (options_.rollout_metrics)
      options_.rollout_metrics->forget(platform::ModelRef{req.namespace_, req.name, ""});
    return reconcile::Action::await_change();
  }
  for (int attempt = 0; attempt <= options_.max_conflict_retries; ++attempt) {
    auto in = read_model(*object);
    if (!in.ok()) {
      // Without readable metadata there is nothing to write status to; retrying will not help.
      log::error("unreadable InferenceModel", {{"model", req.key()}, {"error", in.error().to_string()}});
      return reconcile::Action::await_change();
    }
    if (in->meta.deletion_timestamp) return reconcile::Action::await_change();
    INFERGATE_ASSIGN_OR_RETURN(Observed ob, observe(*in));
    PlanContext ctx{clock_.wall_now(), options_.images, platform_.layout(), options_.trust_recheck};
    Plan p = plan_model(*in, ob, ctx);
    const platform::ModelRef ref = model_ref(in->meta);
    if (Status done = execute(ref, p); !done.ok()) {
      if (transient(done.error())) return std::move(done).error();
      // The platform refused what we asked for: that is the user's to see, not ours to retry blindly.
      const api::InferenceModelStatus before = p.status;
      for (auto type : {api::condition::kReady, api::condition::kProgressing}) {
        api::set_condition(
            p.status.conditions,
            api::Condition{
                std::string(type), "False", "DeployFailed", done.error().message(), in->meta.generation, {}},
            ctx.now);
      }
      const api::Condition* prev = api::find_condition(in->status.conditions, api::condition::kReady);
      if (!prev || prev->reason != "DeployFailed" || prev->message != done.error().message()) {
        p.events.push_back({platform::EventRecord::Type::kWarning, "DeployFailed", done.error().message()});
      }
      p.next = reconcile::Action::requeue_after(std::chrono::minutes(1));
    }
    Json status = api::status_to_json(p.status);
    const Json current = object->contains("status") ? (*object)["status"] : Json::object();
    if (status != current) {
      auto written = models_.write_status(*object, status);
      if (!written.ok()) {
        if (written.error().code() == ErrorCode::kConflict) {
          log::debug("status conflict, re-reading", {{"model", req.key()}, {"attempt", attempt + 1}});
          INFERGATE_ASSIGN_OR_RETURN(object, models_.get_fresh(req.namespace_, req.name));
          if (!object) return reconcile::Action::await_change();
          continue;
        }
        if (written.error().code() == ErrorCode::kNotFound) return reconcile::Action::await_change();
        return std::move(written).error().context("writing status");
      }
    }
    for (const auto& e : p.events) events_.emit(ref, e);
    if (options_.rollout_metrics) {
      for (const auto& m : p.rollout_events) options_.rollout_metrics->record(ref, m);
      if (p.version_drift) options_.rollout_metrics->set_version_drift(ref, *p.version_drift);
    }
    for (const auto& e : p.events) {
      if (e.type == platform::EventRecord::Type::kWarning || e.reason == "StageStarted" ||
          e.reason == "Promoted")
        log::info("rollout", {{"model", req.key()}, {"reason", e.reason}, {"message", e.message}});
    }
    return p.next;
  }
  return Error(ErrorCode::kConflict, "status of " + req.key() + " kept conflicting; retrying later",
               "Conflict");
}

void InferenceModelReconciler::record_failure(const reconcile::Request& req, const std::string& what) {
  try {
    if (Status st = mark_failed(req, what); !st.ok()) {
      log::warn("cannot record a failed reconcile on the object",
                {{"model", req.key()}, {"error", st.error().to_string()}});
    }
  } catch (const std::exception& e) {
    log::error("recording a failed reconcile threw",
               {{"model", req.key()}, {"error", std::string(e.what())}});
  }
}

// Ready=False and Progressing=False with reason ReconcileError on the object, and one Warning Event
// when that is new. Only the metadata and the status are read (the spec may be what threw); the rest of
// the status is kept as it was, and a status that does not read as ours gets only its conditions.
Status InferenceModelReconciler::mark_failed(const reconcile::Request& req, const std::string& what) {
  INFERGATE_ASSIGN_OR_RETURN(std::optional<Json> object, models_.get(req.namespace_, req.name));
  if (!object) return ok_status();
  INFERGATE_ASSIGN_OR_RETURN(api::ObjectMeta meta, api::parse_object_meta(*object));
  const std::string message = "the operator failed while reconciling this object (" + what.substr(0, 512) +
                              "); it retries with backoff, and nothing else was changed by this attempt";
  const Json current = status_of(*object);
  auto parsed = api::parse_status(current);
  api::InferenceModelStatus status = parsed.ok() ? std::move(*parsed) : api::InferenceModelStatus{};
  const api::Condition* prev = api::find_condition(status.conditions, api::condition::kReady);
  const bool announced = prev && prev->reason == reconcile::kReconcileError && prev->message == message;
  for (auto type : {api::condition::kReady, api::condition::kProgressing}) {
    api::set_condition(status.conditions,
                       api::Condition{std::string(type),
                                      "False",
                                      std::string(reconcile::kReconcileError),
                                      message,
                                      meta.generation,
                                      {}},
                       clock_.wall_now());
  }
  Json next = api::status_to_json(status);
  if (!parsed.ok()) {  // keep what is there for a person to look at; replace only the conditions
    Json kept = current;
    kept["conditions"] = next["conditions"];
    next = std::move(kept);
  }
  if (next != current) INFERGATE_RETURN_IF_ERROR(models_.write_status(*object, next));
  if (!announced) {
    events_.emit(model_ref(meta),
                 {platform::EventRecord::Type::kWarning, std::string(reconcile::kReconcileError), message});
  }
  return ok_status();
}

}  // namespace infergate::op::controllers
