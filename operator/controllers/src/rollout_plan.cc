// The staged rollout plan: the state machine's step (rollout_machine.cc) around the steady state.
#include "infergate/operator/controllers/rollout_plan.h"

#include "infergate/operator/api/conditions.h"
#include "infergate/operator/controllers/rollout_machine.h"

namespace infergate::op::controllers {
namespace {

namespace cond = api::condition;
using platform::EventRecord;

// The step's conditions over the steady state's.
void overlay_conditions(const ModelInput& in, const Step& step, const RolloutState& rs,
                        const PlanContext& ctx, Plan& plan) {
  api::InferenceModelStatus& st = plan.status;
  // CapacityFits: the steady state drops it when not checked; keep the last stage check instead.
  if (const api::Condition* prevc = api::find_condition(in.status.conditions, cond::kCapacityFits);
      prevc && !api::find_condition(st.conditions, cond::kCapacityFits)) {
    st.conditions.push_back(*prevc);
  }
  if (step.capacity) {
    const api::Condition* prev = api::find_condition(in.status.conditions, step.capacity->type);
    const bool flipped =
        !prev || prev->status != step.capacity->status || prev->reason != step.capacity->reason;
    if (flipped && step.capacity->status == cond::kFalse)
      plan.events.push_back({EventRecord::Type::kWarning, step.capacity->reason, step.capacity->message});
    api::set_condition(st.conditions, *step.capacity, ctx.now);
  }
  if (step.rolled_back) api::set_condition(st.conditions, *step.rolled_back, ctx.now);
  if (step.progressing) {
    // Progressing keeps the steady state's verdict while stable itself is still rolling or failing.
    const api::Condition* mine = api::find_condition(st.conditions, cond::kProgressing);
    const bool stable_busy = mine && mine->status == cond::kTrue && mine->reason == "Deploying" && !rs.stage;
    const bool stable_failing = mine && mine->reason == "VerificationFailed";
    if (!stable_failing && !(stable_busy && step.progressing->reason == "WaitingForStable")) {
      api::set_condition(st.conditions, *step.progressing, ctx.now);
    }
  }
}

// Stable pods whose verified release is not the one stable should serve.
std::optional<int> version_drift(const platform::WorkloadState& stable, const api::InferenceModelStatus& st) {
  if (!st.stable || st.stable->release_digest.empty()) return std::nullopt;
  int drift = 0;
  for (const auto& p : stable.pods) {
    if (p.deleting || p.verify.phase != platform::VerifyState::Phase::kSucceeded) continue;
    api::VerificationReport r =
        api::parse_termination_message(p.verify.termination_message, p.verify.exit_code);
    if (r.verified && r.release_digest != st.stable->release_digest) ++drift;
  }
  return drift;
}

}  // namespace

std::optional<api::PodConfig> stable_config(const ModelInput& in, const api::Images& images) {
  if (!in.status.stable) return std::nullopt;
  std::optional<api::PodConfig> out;
  if (in.status.stable->pod_config.is_object()) {
    auto pc = api::pod_config_from_json(in.status.stable->pod_config);
    if (pc.ok()) out = *pc;
  }
  // A status written before podConfig existed: only a stable that is the spec can be rendered again.
  if (!out && in.spec && in.status.stable->revision == api::revision(api::pod_config(*in.spec)))
    out = api::pod_config(*in.spec);
  // Written before images were recorded: stable adopts the operator's images, once (its pods take
  // them, as every operator upgrade did before); from then on a new operator's images come as a stage.
  if (out && out->images.agent.empty()) out->images = images;
  return out;
}

std::optional<rollout::Stage> next_stage(const ModelInput& in, const api::Images& images) {
  if (!in.spec) return std::nullopt;
  auto stable = stable_config(in, images);
  if (!stable) return std::nullopt;
  auto stages =
      rollout::plan_stages(*stable, api::pod_config(*in.spec, images), in.spec->rollout.stage_order);
  if (stages.empty()) return std::nullopt;
  return stages.front();
}

Plan plan_model(const ModelInput& in, const Observed& ob, const PlanContext& ctx) {
  if (!in.spec || (ob.trust && *ob.trust != platform::TrustState::kPresent))
    return plan_steady_state(in, ob, ctx);
  const std::optional<api::PodConfig> stable_pc = stable_config(in, ctx.images);
  if (!stable_pc) {
    // The first deployment: nothing serves, so there is nothing to canary against.
    Plan p = plan_steady_state(in, ob, ctx);
    if (ob.canary.exists)
      p.actions.push_back({PlannedAction::Kind::kDeleteWorkload,
                           {},
                           {},
                           api::workload_name(in.meta.name, api::Track::kCanary),
                           {},
                           {}});
    return p;
  }

  // ---- The state machine's step ----
  RolloutState rs{in.status.stage, in.status.canary, in.status.failed_revisions, in.status.control};
  Step control;
  const RolloutContext c = rollout_context(in, ob, ctx, *stable_pc, rs, control);
  Step step = run_machine(c, rs);

  // ---- The stable workload, through the steady state ----
  Observed ob2 = ob;
  ob2.capacity.reset();  // stages are capacity-checked by the machine, before they start
  const StableTarget target = step.stable.value_or(StableTarget{*stable_pc, in.spec->replicas, false});
  Plan plan = plan_steady_state(in, ob2, ctx, &target);
  api::InferenceModelStatus& st = plan.status;
  if (step.promoted && st.stable && st.stable->revision == step.promoted->revision &&
      st.stable->release_digest.empty()) {
    st.stable->release_digest = step.promoted->release_digest;
    st.stable->release_version = step.promoted->release_version;
  }

  // ---- Overlay the rollout on the steady state's status ----
  st.stage = rs.stage;
  if (rs.canary && rs.stage) rs.canary->replicas = in.spec->rollout.canary.replicas;
  st.canary = rs.stage ? rs.canary : std::nullopt;
  // status.replicas (the scale subresource's current count, what an HPA scales from) counts the pods
  // that stand for spec.replicas: a canary that does not surge took its pods from stable.
  if (rs.stage && !in.spec->rollout.canary.surge) {
    for (const auto& p : ob.canary.pods) st.replicas += p.deleting ? 0 : 1;
  }
  st.failed_revisions = rs.failed_revisions;
  st.control = rs.control;
  for (auto& h : step.history) {
    st.history.push_back(std::move(h));
    if (st.history.size() > api::kMaxHistory) st.history.erase(st.history.begin());
  }
  overlay_conditions(in, step, rs, ctx, plan);
  if (const auto* v = api::find_condition(st.conditions, cond::kVerified); v && v->status == cond::kFalse) {
    const auto* pv = api::find_condition(in.status.conditions, cond::kVerified);
    if (!pv || pv->status != cond::kFalse || pv->reason != v->reason)
      step.metrics.push_back({RolloutEvent::Kind::kVerificationFailure, "", "", v->reason, 0});
  }
  plan.version_drift = version_drift(ob.stable, st);

  // Rollout actions after the stable's (a canary that takes stable's pods scales stable down first).
  for (auto& a : step.actions) plan.actions.push_back(std::move(a));
  std::vector<EventRecord> events = std::move(control.events);
  for (auto& e : step.events) events.push_back(std::move(e));
  for (auto& e : events) plan.events.push_back(std::move(e));
  plan.rollout_events = std::move(step.metrics);
  plan.next = plan.next.merge(step.requeue);
  return plan;
}

}  // namespace infergate::op::controllers
