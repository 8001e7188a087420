// The steady-state plan: desired workload and endpoint, conditions, events. Pure.
#include "infergate/operator/controllers/steady_state.h"

#include <algorithm>

#include "infergate/operator/api/conditions.h"
#include "infergate/operator/controllers/pod_trouble.h"

namespace infergate::op::controllers {
namespace {

namespace cond = api::condition;
using platform::EventRecord;

constexpr auto make = api::make_condition;

// Whether a condition is new or its status or reason moved since the last status: the moments worth
// telling users about.
const api::Condition* transitioned(const api::InferenceModelStatus& before,
                                   const api::InferenceModelStatus& after, std::string_view type) {
  const api::Condition* now = api::find_condition(after.conditions, type);
  if (!now) return nullptr;
  const api::Condition* prev = api::find_condition(before.conditions, type);
  if (prev && prev->status == now->status && prev->reason == now->reason) return nullptr;
  return now;
}

// Reasons for Ready=False that only describe progress, not a problem to report.
bool quiet_reason(const std::string& reason) {
  return reason == "WaitingForReplicas" || reason == "ScaledToZero" || reason == "VerificationFailed";
}

void condition_events(const api::InferenceModelStatus& before, Plan& plan) {
  const auto& after = plan.status;
  if (const auto* v = transitioned(before, after, cond::kVerified)) {
    if (v->status == cond::kTrue) {
      plan.events.push_back({EventRecord::Type::kNormal, "Verified", v->message});
    } else if (v->status == cond::kFalse) {
      plan.events.push_back({EventRecord::Type::kWarning, v->reason, v->message});
    }
  }
  if (const auto* r = transitioned(before, after, cond::kReady)) {
    const auto* prev = api::find_condition(before.conditions, cond::kReady);
    bool rolled_out = std::any_of(plan.events.begin(), plan.events.end(),
                                  [](const EventRecord& e) { return e.reason == "RolledOut"; });
    if (r->status == cond::kTrue && !rolled_out) {  // "RolledOut ... is serving" already says it
      plan.events.push_back({EventRecord::Type::kNormal, "Ready", r->message});
    } else if (r->status == cond::kFalse &&
               (!quiet_reason(r->reason) || (prev && prev->status == cond::kTrue))) {
      plan.events.push_back({EventRecord::Type::kWarning, r->reason, r->message});
    }
  }
  for (auto type : {cond::kCapacityFits, cond::kStableHealthy}) {
    if (const auto* c = transitioned(before, after, type); c && c->status == cond::kFalse)
      plan.events.push_back({EventRecord::Type::kWarning, c->reason, c->message});
  }
}

// The spec cannot be served as written (or its trust keys are missing): say why, deploy nothing,
// leave whatever is already serving alone.
void blocked(Plan& plan, const ModelInput& in, const std::string& reason, const std::string& message,
             const PlanContext& ctx) {
  const int64_t gen = in.meta.generation;
  api::set_condition(plan.status.conditions, make(cond::kReady, cond::kFalse, reason, message, gen), ctx.now);
  api::set_condition(plan.status.conditions, make(cond::kProgressing, cond::kFalse, reason, message, gen),
                     ctx.now);
}

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

Result<ModelInput> read_model(const Json& object) {
  INFERGATE_ASSIGN_OR_RETURN(api::ObjectMeta meta, api::parse_object_meta(object));
  ModelInput in;
  in.meta = std::move(meta);
  if (auto st = object.find("status"); st != object.end() && st->is_object()) {
    auto status = api::parse_status(*st);
    if (status.ok()) in.status = std::move(*status);
  }
  auto parsed = api::parse_inference_model(object);
  if (parsed.ok()) {
    in.spec = std::move(parsed->spec);
  } else {
    in.invalid_reason = parsed.error().reason().empty() ? "InvalidSpec" : parsed.error().reason();
    in.invalid_message = parsed.error().message();
  }
  return in;
}

platform::ModelRef model_ref(const api::ObjectMeta& meta) {
  return platform::ModelRef{meta.namespace_, meta.name, meta.uid};
}

std::map<std::string, std::string> model_labels(const std::string& model, api::Track track) {
  return {{std::string(api::labels::kName), "infergate-model"},
          {std::string(api::labels::kInstance), model},
          {std::string(api::labels::kComponent), "model-server"},
          {std::string(api::labels::kManagedBy), std::string(api::labels::kManagedByValue)},
          {std::string(api::labels::kModel), model},
          {std::string(api::labels::kTrack), std::string(api::to_string(track))}};
}

Result<platform::WorkloadSpec> render_workload(const std::string& model, const api::PodConfig& config,
                                               api::Track track, int32_t replicas, const PlanContext& ctx) {
  // The images the configuration records (a new operator's reach a model through a stage), or, for
  // one read from a status older than that, the operator's own.
  const api::Images& images = api::images_of(config, ctx.images);
  INFERGATE_ASSIGN_OR_RETURN(api::EngineCommand engine,
                             api::engine_command(config, model, ctx.layout, images));
  INFERGATE_ASSIGN_OR_RETURN(const api::EngineProfile* profile, api::engine_profile_for(config));
  for (const auto& e : config.scheduling.env) {
    const std::string name = e.value("name", "");
    for (const auto& prefix : profile->env_flag_prefixes) {
      if (name.rfind(prefix, 0) == 0) {
        return Error(ErrorCode::kInvalidArgument,
                     "spec.podTemplate.env: " + name + " is read by " + std::string(profile->name) +
                         " as a command-line option, past the engine.args check; pass it in spec.engine.args",
                     "ConflictingEnv");
      }
    }
    if (engine.container.env.count(name)) {
      return Error(ErrorCode::kInvalidArgument,
                   "spec.podTemplate.env: " + name + " is set by the " +
                       std::string(api::to_string(config.engine.kind)) +
                       " engine adapter; drop it from podTemplate.env",
                   "ConflictingEnv");
    }
  }
  platform::WorkloadSpec w;
  w.name = api::workload_name(model, track);
  w.track = track;
  w.revision = api::revision(config);
  w.replicas = replicas;
  w.labels = model_labels(model, track);
  w.verify = api::agent_verify_command(config, ctx.layout, images);
  w.trust_secret = config.artifact.trust.public_key_secret;
  w.engine = std::move(engine);
  w.artifact = config.artifact;
  w.resources = config.resources;
  w.scheduling = config.scheduling;
  w.summary = api::summarize(config.serving);
  return w;
}

std::map<std::string, std::string> stable_pod_labels(const std::string& model) {
  return {{std::string(api::labels::kModel), model},
          {std::string(api::labels::kTrack), std::string(api::to_string(api::Track::kStable))}};
}

std::string stable_selector(const std::string& model) {
  std::string out;
  for (const auto& [k, v] : stable_pod_labels(model)) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

platform::DisruptionBudgetSpec render_disruption_budget(const std::string& model, int32_t replicas) {
  platform::DisruptionBudgetSpec b;
  b.name = model;
  b.selector = stable_pod_labels(model);
  b.labels = model_labels(model, api::Track::kStable);
  b.labels.erase(std::string(api::labels::kTrack));
  b.max_unavailable = std::max<int32_t>(1, replicas / 4);
  return b;
}

platform::EndpointSpec render_endpoint(const std::string& model) {
  platform::EndpointSpec e;
  e.name = api::endpoint_name(model);
  e.selector = {{std::string(api::labels::kModel), model}};
  e.labels = model_labels(model, api::Track::kStable);
  e.labels.erase(std::string(api::labels::kTrack));
  e.port = 80;
  return e;
}

bool is_applied(const platform::WorkloadState& observed, const platform::WorkloadSpec& spec) {
  return observed.exists && observed.template_hash == spec.template_hash() &&
         observed.replicas == spec.replicas && (!observed.surge || *observed.surge == spec.surge);
}

bool runs_fully(const platform::WorkloadState& observed, const platform::WorkloadSpec& spec) {
  if (!is_applied(observed, spec) || !observed.observed_current) return false;
  for (const auto& p : observed.pods) {
    if (!p.deleting && p.revision != spec.revision) return false;
  }
  return observed.updated_replicas >= spec.replicas && observed.ready_replicas >= spec.replicas;
}

PodVerdicts verification_from_pods(const platform::WorkloadState& workload, const std::string& revision) {
  PodVerdicts out;
  for (const auto& p : workload.pods) {
    if (p.revision != revision) continue;
    const auto& v = p.verify;
    if (v.phase != platform::VerifyState::Phase::kFailed &&
        v.phase != platform::VerifyState::Phase::kSucceeded) {
      continue;
    }
    api::VerificationReport r = api::parse_termination_message(v.termination_message, v.exit_code);
    if (r.verified) {
      out.verified.emplace_back(p.name, std::move(r));
    } else {
      out.refused.emplace_back(p.name, std::move(r));
    }
  }
  return out;
}

Plan plan_steady_state(const ModelInput& in, const Observed& ob, const PlanContext& ctx,
                       const StableTarget* target) {
  Plan plan;
  api::InferenceModelStatus& st = plan.status;
  st = in.status;
  const api::InferenceModelStatus before = in.status;
  const int64_t gen = in.meta.generation;
  const std::string& name = in.meta.name;
  st.observed_generation = gen;
  int32_t pods = 0;
  for (const auto& p : ob.stable.pods) pods += p.deleting ? 0 : 1;
  st.replicas = pods;
  st.ready_replicas = ob.stable.ready_replicas;
  st.selector = stable_selector(name);

  auto finish = [&]() -> Plan& {
    condition_events(before, plan);
    return plan;
  };

  if (!in.spec) {
    blocked(plan, in, in.invalid_reason, in.invalid_message, ctx);
    return finish();
  }
  const api::InferenceModelSpec& spec = *in.spec;
  if (ob.trust && *ob.trust == platform::TrustState::kMissing) {
    blocked(plan, in, "TrustKeyMissing",
            "Secret \"" + spec.artifact.trust.public_key_secret +
                "\" with the release signing public keys does not "
                "exist in namespace " +
                in.meta.namespace_ + "; nothing is deployed until it does",
            ctx);
    plan.next = reconcile::Action::requeue_after(ctx.trust_recheck);
    return finish();
  }
  if (ob.trust && *ob.trust == platform::TrustState::kForbidden) {
    // Waiting does not fix RBAC: say which permission is missing and which chart value grants it.
    blocked(plan, in, "TrustKeyForbidden",
            "the operator may not read Secret \"" + spec.artifact.trust.public_key_secret +
                "\" in namespace " + in.meta.namespace_ +
                " (403 Forbidden): it needs \"get\" on secrets there. With the Helm chart, "
                "add \"" +
                in.meta.namespace_ +
                "\" to rbac.trustSecretNamespaces (when every namespace is "
                "watched) or to watchNamespaces, and the Secret's name to rbac.trustSecretNames if that list "
                "is set; nothing is deployed until then",
            ctx);
    plan.next = reconcile::Action::requeue_after(ctx.trust_recheck);
    return finish();
  }
  const api::PodConfig pc = target ? target->config : api::pod_config(spec, ctx.images);
  auto rendered =
      render_workload(name, pc, api::Track::kStable, target ? target->replicas : spec.replicas, ctx);
  if (!rendered.ok()) {
    std::string reason = rendered.error().reason().empty() ? "InvalidSpec" : rendered.error().reason();
    blocked(plan, in, reason, rendered.error().message(), ctx);
    return finish();
  }
  rendered->surge = spec.rollout.canary.surge;  // no room for a surge pod for canaries, none for updates
  const platform::WorkloadSpec& wl = *rendered;
  if (ob.capacity) {
    api::set_condition(st.conditions,
                       make(cond::kCapacityFits, ob.capacity->condition_status(), ob.capacity->reason,
                            ob.capacity->message, gen),
                       ctx.now);
    if (ob.capacity->blocks()) {
      blocked(plan, in, ob.capacity->reason, ob.capacity->message, ctx);
      return finish();
    }
  }
  // Not checked this time (no checker, or the rollout checks stages itself): an earlier check's
  // condition stays where it is (moving it would rewrite an unchanged status); none is invented.

  // Actions: only what differs from what the platform reports.
  const std::string hash = wl.template_hash();
  const bool need_apply = !is_applied(ob.stable, wl);
  if (need_apply) {
    plan.actions.push_back({PlannedAction::Kind::kApplyWorkload, wl, {}, "", {}, {}});
    std::string what = "revision " + wl.revision + " (" + wl.summary + ")";
    if (!ob.stable.exists) {
      plan.events.push_back(
          {EventRecord::Type::kNormal, "Deploying",
           "creating workload " + wl.name + ": " + what + ", " + plural(wl.replicas, "replica")});
    } else if (ob.stable.template_hash != hash) {
      plan.events.push_back(
          {EventRecord::Type::kNormal, "Deploying", "updating workload " + wl.name + " to " + what});
    } else if (ob.stable.replicas != wl.replicas) {
      plan.events.push_back({EventRecord::Type::kNormal, "Scaling",
                             "scaling workload " + wl.name + " from " + std::to_string(ob.stable.replicas) +
                                 " to " + plural(wl.replicas, "replica")});
    }
  }
  const platform::EndpointSpec ep = render_endpoint(name);
  if (!ob.endpoint.exists || ob.endpoint.hash != ep.hash()) {
    plan.actions.push_back({PlannedAction::Kind::kApplyEndpoint, {}, ep, "", {}, {}});
  }
  // From spec.replicas, not the stable workload's replicas of the moment (a canary that does not
  // surge takes some): the budget stays put through a rollout.
  const platform::DisruptionBudgetSpec budget = render_disruption_budget(name, spec.replicas);
  if (ob.disruption_budget.supported &&
      (!ob.disruption_budget.exists || ob.disruption_budget.hash != budget.hash())) {
    plan.actions.push_back({PlannedAction::Kind::kApplyDisruptionBudget, {}, {}, "", {}, budget});
  }

  const int32_t desired = wl.replicas;
  const bool rolled_out = runs_fully(ob.stable, wl);

  // Verified: from the agent's verdicts in the pods of the desired revision.
  const PodVerdicts verdicts = verification_from_pods(ob.stable, wl.revision);
  if (!verdicts.refused.empty()) {
    const auto& [pod, r] = verdicts.refused.front();
    api::set_condition(
        st.conditions,
        make(cond::kVerified, cond::kFalse, r.reason,
             r.describe() + " (pod " + pod + ", agent exit code " + std::to_string(r.exit_code) + ")", gen),
        ctx.now);
  } else if (!verdicts.verified.empty()) {
    const auto& r = verdicts.verified.front().second;
    std::string msg = "release " + r.release_digest;
    if (!r.name.empty())
      msg += " (" + r.name + (r.version ? " version " + std::to_string(*r.version) : "") + ")";
    msg += " verified by the agent for revision " + wl.revision;
    api::set_condition(st.conditions, make(cond::kVerified, cond::kTrue, "Verified", msg, gen), ctx.now);
  } else if (desired == 0) {
    api::set_condition(
        st.conditions,
        make(cond::kVerified, cond::kUnknown, "NoPods", "scaled to zero: no pod to verify the release", gen),
        ctx.now);
  } else {
    api::set_condition(st.conditions,
                       make(cond::kVerified, cond::kUnknown, "AwaitingVerification",
                            "waiting for a pod of revision " + wl.revision + " to verify the release", gen),
                       ctx.now);
  }

  // Stable: what serves once the workload has fully moved to the desired revision.
  if (rolled_out) {
    api::ReleaseConfig rc = api::release_config(pc);
    if (!verdicts.verified.empty()) {
      rc.release_digest = verdicts.verified.front().second.release_digest;
      rc.release_version = verdicts.verified.front().second.version;
    } else if (st.stable && st.stable->revision == rc.revision) {
      rc.release_digest = st.stable->release_digest;
      rc.release_version = st.stable->release_version;
    }
    if ((!st.stable || st.stable->revision != rc.revision) && !(target && target->promotion)) {
      st.history.push_back(
          api::HistoryEntry{"", rc.revision, "Deployed", "RolledOut",
                            rc.summary + (rc.release_digest.empty() ? "" : " " + rc.release_digest),
                            std::chrono::time_point_cast<std::chrono::seconds>(ctx.now)});
      if (st.history.size() > api::kMaxHistory) st.history.erase(st.history.begin());
      plan.events.push_back({EventRecord::Type::kNormal, "RolledOut",
                             "revision " + rc.revision + " is serving " + rc.summary +
                                 (rc.release_digest.empty() ? "" : " from release " + rc.release_digest)});
    }
    st.stable = rc;
  }

  // StableHealthy: stable's own pods, whatever revision they run (a rolling update's new pods too).
  const std::optional<PodTrouble> trouble = workload_trouble(ob.stable, "");
  if (ob.stable.exists) {
    api::set_condition(st.conditions,
                       trouble ? make(cond::kStableHealthy, cond::kFalse, trouble->reason,
                                      trouble->message + trouble_hint(*trouble), gen)
                               : make(cond::kStableHealthy, cond::kTrue, "PodsRunning",
                                      "no stable pod is failing to run", gen),
                       ctx.now);
  }

  // Ready and Progressing.
  const int32_t ready = ob.stable.ready_replicas;
  const std::string counts = std::to_string(ready) + "/" + std::to_string(desired) + " replicas ready";
  if (desired == 0) {
    api::set_condition(st.conditions,
                       make(cond::kReady, cond::kFalse, "ScaledToZero", "spec.replicas is 0", gen), ctx.now);
  } else if (ob.stable.exists && ready >= desired) {
    api::set_condition(st.conditions, make(cond::kReady, cond::kTrue, "Serving", counts, gen), ctx.now);
  } else if (!verdicts.refused.empty()) {
    api::set_condition(st.conditions,
                       make(cond::kReady, cond::kFalse, "VerificationFailed",
                            counts + "; the agent refuses to start revision " + wl.revision + ": " +
                                verdicts.refused.front().second.describe(),
                            gen),
                       ctx.now);
  } else if (trouble) {
    api::set_condition(
        st.conditions,
        make(cond::kReady, cond::kFalse, "PodsNotReady", counts + "; " + trouble->message, gen), ctx.now);
  } else {
    api::set_condition(st.conditions, make(cond::kReady, cond::kFalse, "WaitingForReplicas", counts, gen),
                       ctx.now);
  }
  if (!verdicts.refused.empty()) {
    api::set_condition(
        st.conditions,
        make(cond::kProgressing, cond::kFalse, "VerificationFailed",
             "revision " + wl.revision + " cannot start: " + verdicts.refused.front().second.describe(), gen),
        ctx.now);
  } else if (rolled_out) {
    api::set_condition(st.conditions,
                       make(cond::kProgressing, cond::kFalse, "Deployed",
                            "revision " + wl.revision + " (" + wl.summary + ") is serving", gen),
                       ctx.now);
  } else {
    api::set_condition(st.conditions,
                       make(cond::kProgressing, cond::kTrue, "Deploying",
                            "rolling out revision " + wl.revision + " (" + wl.summary + ")", gen),
                       ctx.now);
  }
  return finish();
}

}  // namespace infergate::op::controllers
