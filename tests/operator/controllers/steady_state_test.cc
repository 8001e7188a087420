// The pure steady-state plan: actions, conditions, events, idempotence.
#include "infergate/operator/controllers/steady_state.h"

#include <gtest/gtest.h>

#include "api/testdata.h"
#include "infergate/operator/api/conditions.h"

namespace infergate::op::controllers {
namespace {

using namespace std::chrono_literals;
using platform::EventRecord;

const std::string kDigest = "sha256:" + std::string(64, 'd');

WallTime t0() { return *parse_rfc3339("2026-11-29T12:00:00Z"); }

PlanContext ctx(WallTime now = t0()) { return PlanContext{now, api::Images{}, api::Layout{}}; }

ModelInput input(std::function<void(Json&)> edit = {}) {
  Json j = api::testing::valid_model();
  if (edit) edit(j);
  auto in = read_model(j);
  EXPECT_TRUE(in.ok()) << in.error().to_string();
  return *in;
}

platform::WorkloadSpec desired(const ModelInput& in) {
  auto w = render_workload(in.meta.name, api::pod_config(*in.spec, ctx().images), api::Track::kStable,
                           in.spec->replicas, ctx());
  EXPECT_TRUE(w.ok());
  return *w;
}

platform::PodState pod(const std::string& name, const std::string& revision, bool ready, int exit_code,
                       const std::string& message) {
  platform::PodState p;
  p.name = name;
  p.revision = revision;
  p.ready = ready;
  p.phase = ready ? platform::PodState::Phase::kRunning : platform::PodState::Phase::kPending;
  p.verify.phase =
      exit_code == 0 ? platform::VerifyState::Phase::kSucceeded : platform::VerifyState::Phase::kFailed;
  p.verify.exit_code = exit_code;
  p.verify.termination_message = message;
  return p;
}

std::string verified_message() {
  return R"({"reason":"Verified","releaseDigest":")" + kDigest +
         R"(","name":"glm-4-9b","version":3,"weightFormat":"int8"})";
}

// The world after the workload and endpoint were applied and every pod came up verified.
Observed serving(const ModelInput& in, int ready = 2) {
  auto w = desired(in);
  Observed ob;
  ob.trust = platform::TrustState::kPresent;
  ob.stable.exists = true;
  ob.stable.template_hash = w.template_hash();
  ob.stable.revision = w.revision;
  ob.stable.replicas = w.replicas;
  ob.stable.updated_replicas = w.replicas;
  ob.stable.ready_replicas = ready;
  ob.stable.observed_current = true;
  for (int i = 0; i < w.replicas; ++i) {
    ob.stable.pods.push_back(
        pod("glm-4-9b-" + std::to_string(i), w.revision, i < ready, 0, verified_message()));
  }
  ob.endpoint.exists = true;
  ob.endpoint.hash = render_endpoint(in.meta.name).hash();
  ob.disruption_budget.exists = true;
  ob.disruption_budget.hash = render_disruption_budget(in.meta.name, in.spec ? in.spec->replicas : 0).hash();
  return ob;
}

const api::Condition& condition(const Plan& p, std::string_view type) {
  const api::Condition* c = api::find_condition(p.status.conditions, type);
  EXPECT_NE(c, nullptr) << type;
  static const api::Condition none;
  return c ? *c : none;
}

bool has_event(const Plan& p, const std::string& reason) {
  for (const auto& e : p.events) {
    if (e.reason == reason) return true;
  }
  return false;
}

TEST(SteadyState, ANewModelGetsAWorkloadAndAnEndpoint) {
  ModelInput in = input();
  Observed ob;
  ob.trust = platform::TrustState::kPresent;
  Plan p = plan_steady_state(in, ob, ctx());
  ASSERT_EQ(p.actions.size(), 3u);
  EXPECT_EQ(p.actions[0].kind, PlannedAction::Kind::kApplyWorkload);
  EXPECT_EQ(p.actions[0].workload.name, "glm-4-9b");
  EXPECT_EQ(p.actions[0].workload.replicas, 2);
  EXPECT_EQ(p.actions[1].kind, PlannedAction::Kind::kApplyEndpoint);
  EXPECT_EQ(p.actions[2].kind, PlannedAction::Kind::kApplyDisruptionBudget);
  EXPECT_EQ(p.actions[2].budget.max_unavailable, 1);
  // A platform without voluntary disruptions is never asked for a budget.
  ob.disruption_budget.supported = false;
  EXPECT_EQ(plan_steady_state(in, ob, ctx()).actions.size(), 2u);
  EXPECT_EQ(condition(p, "Progressing").status, "True");
  EXPECT_EQ(condition(p, "Progressing").reason, "Deploying");
  EXPECT_EQ(condition(p, "Verified").status, "Unknown");
  EXPECT_EQ(condition(p, "Ready").reason, "WaitingForReplicas");
  EXPECT_EQ(p.status.observed_generation, 3);
  EXPECT_FALSE(p.status.stable.has_value());
  EXPECT_TRUE(has_event(p, "Deploying"));
  EXPECT_EQ(api::find_condition(p.status.conditions, "CapacityFits"), nullptr);  // not checked, not claimed
}

TEST(SteadyState, ARolledOutVerifiedModelIsStableReadyAndVerified) {
  ModelInput in = input();
  Plan p = plan_steady_state(in, serving(in), ctx());
  EXPECT_TRUE(p.actions.empty());
  ASSERT_TRUE(p.status.stable.has_value());
  EXPECT_EQ(p.status.stable->release_digest, kDigest);
  EXPECT_EQ(*p.status.stable->release_version, 3);
  EXPECT_EQ(p.status.stable->summary, "int8/int8 ctx=32768 x16");
  EXPECT_EQ(p.status.stable->revision, desired(in).revision);
  EXPECT_EQ(condition(p, "Ready").status, "True");
  EXPECT_EQ(condition(p, "Verified").status, "True");
  EXPECT_NE(condition(p, "Verified").message.find(kDigest), std::string::npos);
  EXPECT_EQ(condition(p, "Progressing").status, "False");
  EXPECT_EQ(condition(p, "Progressing").reason, "Deployed");
  EXPECT_EQ(p.status.ready_replicas, 2);
  ASSERT_EQ(p.status.history.size(), 1u);
  EXPECT_EQ(p.status.history[0].outcome, "Deployed");
  EXPECT_TRUE(has_event(p, "Verified"));
  EXPECT_TRUE(has_event(p, "RolledOut"));
  EXPECT_FALSE(has_event(p, "Ready"));  // one event per moment: RolledOut says it is serving
}

TEST(SteadyState, RecoveredReadinessWithoutARolloutIsAnEvent) {
  ModelInput in = input();
  in.status = plan_steady_state(in, serving(in), ctx()).status;
  Plan down = plan_steady_state(in, serving(in, 0), ctx(t0() + 1min));
  EXPECT_EQ(condition(down, "Ready").status, "False");
  EXPECT_TRUE(has_event(down, "WaitingForReplicas"));  // it was serving: losing that is news
  in.status = down.status;
  Plan up = plan_steady_state(in, serving(in), ctx(t0() + 2min));
  EXPECT_TRUE(has_event(up, "Ready"));
  EXPECT_FALSE(has_event(up, "RolledOut"));
}

TEST(SteadyState, AnUnchangedWorldPlansNothingAndKeepsTheStatus) {
  ModelInput in = input();
  Observed ob = serving(in);
  Plan first = plan_steady_state(in, ob, ctx());
  in.status = first.status;
  for (int i = 1; i <= 100; ++i) {
    Plan again = plan_steady_state(in, ob, ctx(t0() + std::chrono::minutes(i)));
    ASSERT_TRUE(again.actions.empty());
    ASSERT_TRUE(again.events.empty());
    ASSERT_EQ(again.status, first.status) << "reconcile " << i;
  }
}

TEST(SteadyState, TransitionTimesMoveOnlyOnFlips) {
  ModelInput in = input();
  Plan waiting = plan_steady_state(in, serving(in, 0), ctx());
  EXPECT_EQ(condition(waiting, "Ready").status, "False");
  in.status = waiting.status;
  Plan one = plan_steady_state(in, serving(in, 1), ctx(t0() + 10s));
  EXPECT_EQ(condition(one, "Ready").last_transition_time, t0());  // still False, message changed
  EXPECT_EQ(condition(one, "Ready").message, "1/2 replicas ready");
  in.status = one.status;
  Plan ready = plan_steady_state(in, serving(in, 2), ctx(t0() + 20s));
  EXPECT_EQ(condition(ready, "Ready").last_transition_time, t0() + 20s);
}

TEST(SteadyState, AVerificationRefusalIsShownWithReasonAndFile) {
  ModelInput in = input();
  Observed ob = serving(in, 0);
  ob.stable.pods[1] = pod(
      "glm-4-9b-1", desired(in).revision, false, 5,
      R"({"reason":"DigestMismatch","message":"digest differs","file":"model-00003-of-00004.safetensors","expected":"aa","actual":"bb","exitCode":5})");
  ob.stable.pods[0].verify.phase = platform::VerifyState::Phase::kRunning;
  Plan p = plan_steady_state(in, ob, ctx());
  const auto& v = condition(p, "Verified");
  EXPECT_EQ(v.status, "False");
  EXPECT_EQ(v.reason, "DigestMismatch");
  EXPECT_NE(v.message.find("model-00003-of-00004.safetensors"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("glm-4-9b-1"), std::string::npos);
  EXPECT_EQ(condition(p, "Ready").reason, "VerificationFailed");
  EXPECT_EQ(condition(p, "Progressing").status, "False");
  ASSERT_TRUE(has_event(p, "DigestMismatch"));
  for (const auto& e : p.events) {
    if (e.reason == "DigestMismatch") {
      EXPECT_EQ(e.type, EventRecord::Type::kWarning);
    }
  }
  EXPECT_FALSE(p.status.stable.has_value());  // a refused release never becomes stable
}

TEST(SteadyState, AGarbledVerdictIsNeverVerified) {
  ModelInput in = input();
  Observed ob = serving(in);
  for (auto& p : ob.stable.pods) p.verify.termination_message = "";
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_EQ(condition(p, "Verified").status, "False");
  EXPECT_EQ(condition(p, "Verified").reason, "VerificationFailed");
}

TEST(SteadyState, AnInvalidSpecDeploysNothingAndSaysWhy) {
  ModelInput in = input([](Json& j) { j["spec"]["serving"]["kvCacheDtype"] = "fp9"; });
  ASSERT_FALSE(in.spec.has_value());
  Observed ob;
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_TRUE(p.actions.empty());
  EXPECT_EQ(condition(p, "Ready").reason, "InvalidSpec");
  EXPECT_NE(condition(p, "Ready").message.find("spec.serving.kvCacheDtype"), std::string::npos);
  ASSERT_TRUE(has_event(p, "InvalidSpec"));
  in.status = p.status;
  EXPECT_TRUE(plan_steady_state(in, ob, ctx(t0() + 1min)).events.empty());  // said once
}

TEST(SteadyState, AnEngineRefusalIsAConditionWithTheEnginesReason) {
  ModelInput in = input([](Json& j) {
    j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "vllm/vllm-openai:v0.9.2"}};
  });
  Observed ob;
  ob.trust = platform::TrustState::kPresent;
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_TRUE(p.actions.empty());
  EXPECT_EQ(condition(p, "Ready").reason, "UnsupportedKvCacheDtype");
  EXPECT_TRUE(has_event(p, "UnsupportedKvCacheDtype"));
}

TEST(SteadyState, AMissingTrustSecretDeploysNothingAndChecksAgain) {
  ModelInput in = input();
  Observed ob;
  ob.trust = platform::TrustState::kMissing;
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_TRUE(p.actions.empty());
  EXPECT_EQ(condition(p, "Ready").reason, "TrustKeyMissing");
  EXPECT_NE(condition(p, "Ready").message.find("model-signing-key"), std::string::npos);
  EXPECT_TRUE(has_event(p, "TrustKeyMissing"));
  ASSERT_TRUE(p.next.requeue().has_value());
  EXPECT_EQ(*p.next.requeue(), kTrustRecheck);
}

TEST(SteadyState, ASpecChangeUpdatesTheWorkloadAndKeepsStableUntilRolledOut) {
  ModelInput in = input();
  Observed ob = serving(in);
  in.status = plan_steady_state(in, ob, ctx()).status;
  const auto old_stable = *in.status.stable;
  ModelInput changed = input([](Json& j) {
    j["spec"]["serving"]["kvCacheDtype"] = "fp8";
    j["metadata"]["generation"] = 4;
  });
  changed.status = in.status;
  Plan p = plan_steady_state(changed, ob, ctx(t0() + 1min));
  ASSERT_EQ(p.actions.size(), 1u);
  EXPECT_NE(p.actions[0].workload.template_hash(), ob.stable.template_hash);
  EXPECT_EQ(*p.status.stable, old_stable);
  EXPECT_EQ(condition(p, "Ready").status, "True");  // the old pods still serve
  EXPECT_EQ(condition(p, "Progressing").reason, "Deploying");
  EXPECT_EQ(p.status.observed_generation, 4);
  bool updating = false;
  for (const auto& e : p.events) updating |= e.message.find("updating workload") != std::string::npos;
  EXPECT_TRUE(updating);
}

TEST(SteadyState, AReplicaChangeIsAScale) {
  ModelInput in = input();
  Observed ob = serving(in);
  in.status = plan_steady_state(in, ob, ctx()).status;
  ModelInput scaled = input([](Json& j) { j["spec"]["replicas"] = 4; });
  scaled.status = in.status;
  Plan p = plan_steady_state(scaled, ob, ctx());
  ASSERT_EQ(p.actions.size(), 1u);
  EXPECT_EQ(p.actions[0].workload.replicas, 4);
  EXPECT_TRUE(has_event(p, "Scaling"));
}

TEST(SteadyState, CapacityVerdictsGateTheDeployment) {
  ModelInput in = input();
  Observed ob;
  ob.trust = platform::TrustState::kPresent;
  ob.capacity = CapacityVerdict{false, "KvCacheTooLarge", "needs 90 GiB of 80 GiB", {}};
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_TRUE(p.actions.empty());
  EXPECT_EQ(condition(p, "CapacityFits").status, "False");
  EXPECT_EQ(condition(p, "Ready").reason, "KvCacheTooLarge");
  ob.capacity = CapacityVerdict{true, "Fits", "needs 60 GiB of 80 GiB", {}};
  Plan ok = plan_steady_state(in, ob, ctx());
  EXPECT_EQ(ok.actions.size(), 3u);  // workload, endpoint, disruption budget
  EXPECT_EQ(condition(ok, "CapacityFits").status, "True");
}

TEST(SteadyState, AnUncheckedCapacityIsSaidAndDoesNotBlock) {
  ModelInput in = input();
  Observed ob;
  ob.trust = platform::TrustState::kPresent;
  CapacityVerdict v{false, "CapacityPlanningNotConfigured", "spec.capacityPlanning is not set", {}};
  v.checked = false;
  ob.capacity = v;
  Plan p = plan_steady_state(in, ob, ctx());
  ASSERT_EQ(p.actions.size(), 3u);  // workload, endpoint, disruption budget
  EXPECT_EQ(p.actions[0].kind, PlannedAction::Kind::kApplyWorkload);
  EXPECT_EQ(condition(p, "CapacityFits").status, "Unknown");
  EXPECT_EQ(condition(p, "CapacityFits").reason, "CapacityPlanningNotConfigured");
  EXPECT_EQ(condition(p, "Progressing").reason, "Deploying");
  EXPECT_FALSE(has_event(p, "CapacityPlanningNotConfigured"));
}

TEST(SteadyState, PodsStuckOnTheirImageAreNamedInReady) {
  ModelInput in = input();
  Observed ob = serving(in, 0);
  ob.stable.pods[0].verify.phase = platform::VerifyState::Phase::kNotStarted;
  ob.stable.pods[0].verify.waiting_reason = "ImagePullBackOff";
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_EQ(condition(p, "Ready").reason, "PodsNotReady");
  EXPECT_NE(condition(p, "Ready").message.find("ImagePullBackOff"), std::string::npos);
}

TEST(SteadyState, ScaledToZeroIsNotReadyWithoutAlarm) {
  ModelInput in = input([](Json& j) { j["spec"]["replicas"] = 0; });
  Observed ob = serving(in, 0);
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_EQ(condition(p, "Ready").reason, "ScaledToZero");
  EXPECT_EQ(condition(p, "Verified").reason, "NoPods");
  EXPECT_FALSE(has_event(p, "ScaledToZero"));
}

TEST(SteadyState, StablesOwnTroubleHasItsOwnConditionAndOneWarning) {
  ModelInput in = input();
  Observed ob = serving(in, 1);
  ob.stable.pods[1].ready = false;
  ob.stable.pods[1].unschedulable = true;
  ob.stable.pods[1].schedule_message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.";
  Plan p = plan_steady_state(in, ob, ctx());
  const api::Condition* h = api::find_condition(p.status.conditions, api::condition::kStableHealthy);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->status, "False");
  EXPECT_EQ(h->reason, "Unschedulable");
  EXPECT_NE(h->message.find("Insufficient nvidia.com/gpu"), std::string::npos);
  const api::Condition* r = api::find_condition(p.status.conditions, api::condition::kReady);
  EXPECT_NE(r->message.find("Unschedulable"), std::string::npos) << r->message;
  int warnings = 0;
  for (const auto& e : p.events) warnings += e.reason == "Unschedulable";
  EXPECT_EQ(warnings, 1);
  // The same trouble again: no new event, no change.
  in.status = p.status;
  Plan again = plan_steady_state(in, ob, ctx(t0() + 60s));
  EXPECT_EQ(api::status_to_json(again.status), api::status_to_json(p.status));
  for (const auto& e : again.events) EXPECT_NE(e.reason, "Unschedulable");
}

TEST(SteadyState, AForbiddenTrustSecretNamesThePermissionAndTheChartValue) {
  ModelInput in = input();
  Observed ob;
  ob.trust = platform::TrustState::kForbidden;
  Plan p = plan_steady_state(in, ob, ctx());
  EXPECT_TRUE(p.actions.empty());
  const api::Condition* r = api::find_condition(p.status.conditions, api::condition::kReady);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->reason, "TrustKeyForbidden");
  EXPECT_NE(r->message.find("\"get\" on secrets"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("rbac.trustSecretNamespaces"), std::string::npos);
  ASSERT_TRUE(p.next.requeue().has_value()) << "looked at again later, not in a hot loop";
  EXPECT_GE(*p.next.requeue(), std::chrono::seconds(1));
}

}  // namespace
}  // namespace infergate::op::controllers
