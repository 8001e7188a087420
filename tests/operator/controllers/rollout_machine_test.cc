// The rollout state machine, transition by transition: each row starts from a status (the phase and
// what status remembers), an observed world and the person's annotations, takes one pure step
// (plan_model) and names the phase it must land in, the actions, the events and the Progressing
// reason. A restarted operator is the same step from the same status: the rows hold for it too.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "infergate/operator/api/conditions.h"
#include "infergate/operator/controllers/rollout_machine.h"
#include "infergate/operator/controllers/rollout_plan.h"

namespace infergate::op::controllers {
namespace {

using namespace std::chrono_literals;
using api::StagePhase;

const std::string kVerified = R"({"reason":"Verified","releaseDigest":"sha256:)" + std::string(64, 'a') +
                              R"(","name":"glm","version":4,"weightFormat":"int8"})";
const std::string kTampered =
    R"({"reason":"DigestMismatch","file":"model.safetensors","expected":"aa","actual":"bb"})";

WallTime t0() { return *parse_rfc3339("2026-11-29T12:00:00Z"); }

Json model_json() {
  return Json::parse(R"({
    "apiVersion": "serving.infergate.dev/v1alpha1", "kind": "InferenceModel",
    "metadata": {"name": "glm", "namespace": "models", "uid": "u-1", "generation": 2, "annotations": {}},
    "spec": {
      "replicas": 2,
      "artifact": {"volume": {"persistentVolumeClaim": {"claimName": "artifacts"}}, "path": "glm/int8",
                   "trust": {"publicKeySecretRef": {"name": "keys"}, "expectName": "glm"}},
      "serving": {"weightFormat": "int8", "kvCacheDtype": "fp16", "maxContextLength": 4096, "maxConcurrency": 8},
      "rollout": {"canary": {"replicas": 1, "analysisSeconds": 60, "progressDeadlineSeconds": 600}}
    }})");
}

// fp16 serves; the spec asks for int8 weights: one stage, weights.
api::PodConfig stable_config_fp16() {
  Json j = model_json();
  j["spec"]["serving"]["weightFormat"] = "fp16";
  j["spec"]["artifact"]["path"] = "glm/fp16";
  auto m = api::parse_inference_model(j);
  EXPECT_TRUE(m.ok());
  return api::pod_config(m->spec, api::Images{});  // with the operator's images, as status records them
}

PlanContext ctx(WallTime now) { return PlanContext{now, api::Images{}, api::Layout{}}; }

// A workload that fully runs `config` on `replicas` pods, each in the state `pod` chooses.
platform::WorkloadState running(const api::PodConfig& config, api::Track track, int replicas, bool surge,
                                std::function<void(platform::PodState&)> pod = {}) {
  auto w = render_workload("glm", config, track, replicas, ctx(t0()));
  EXPECT_TRUE(w.ok());
  platform::WorkloadState s;
  s.exists = true;
  s.template_hash = w->template_hash();
  s.revision = w->revision;
  s.replicas = replicas;
  s.updated_replicas = replicas;
  s.observed_current = true;
  s.surge = surge;
  for (int i = 0; i < replicas; ++i) {
    platform::PodState p;
    p.name = w->name + "-" + std::to_string(i);
    p.revision = w->revision;
    p.phase = platform::PodState::Phase::kRunning;
    p.ready = true;
    p.verify.phase = platform::VerifyState::Phase::kSucceeded;
    p.verify.termination_message = kVerified;
    if (pod) pod(p);
    if (p.ready) ++s.ready_replicas;
    s.pods.push_back(p);
  }
  return s;
}

// One row's world, built from defaults that each row edits.
struct World {
  Json object = model_json();
  api::InferenceModelStatus status;
  Observed ob;
  WallTime now = t0() + 10s;
};

rollout::Stage the_stage() {
  auto in = read_model(model_json());
  auto stages = rollout::plan_stages(stable_config_fp16(), api::pod_config(*in->spec, api::Images{}), {});
  EXPECT_EQ(stages.size(), 1u);
  return stages.front();
}

// status.stable serving fp16 on 2 healthy pods; no stage.
World idle_world() {
  World w;
  api::ReleaseConfig rc = api::release_config(stable_config_fp16());
  rc.release_digest = "sha256:" + std::string(64, 'a');
  w.status.stable = rc;
  w.status.observed_generation = 1;
  w.ob.trust = platform::TrustState::kPresent;
  w.ob.stable = running(stable_config_fp16(), api::Track::kStable, 2, true);
  w.ob.endpoint = platform::EndpointState{true, render_endpoint("glm").hash(), "http://glm.models.svc:80"};
  w.ob.disruption_budget =
      platform::DisruptionBudgetState{true, true, render_disruption_budget("glm", 2).hash()};
  return w;
}

// A stage of `phase` running its canary (verified and ready unless `pod` says otherwise).
World stage_world(StagePhase phase, std::function<void(platform::PodState&)> pod = {}) {
  World w = idle_world();
  const rollout::Stage s = the_stage();
  api::StageStatus st;
  st.name = "weights";
  st.revision = s.revision;
  st.phase = phase;
  st.started_at = t0();
  st.from_revision = api::revision(stable_config_fp16());
  if (phase == StagePhase::kAnalyzing || phase == StagePhase::kPromoting) st.analysis_started_at = t0();
  w.status.stage = st;
  api::CanaryStatus cs;
  cs.config = api::release_config(s.to);
  cs.workload = "glm-canary";
  cs.replicas = 1;
  w.status.canary = cs;
  w.ob.canary = running(s.to, api::Track::kCanary, 1, true, std::move(pod));
  return w;
}

struct Row {
  std::string name;
  std::function<World()> world;
  StagePhase next;
  std::set<std::string> actions;  // "apply glm-canary x1", "delete glm-canary", "apply glm x2", ...
  std::set<std::string> events;   // reasons that must be among the step's events
  std::string progressing;        // the Progressing reason after the step ("" = not checked)
};

void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

std::string describe(const PlannedAction& a) {
  switch (a.kind) {
    case PlannedAction::Kind::kApplyWorkload:
      return "apply " + a.workload.name + " x" + std::to_string(a.workload.replicas);
    case PlannedAction::Kind::kApplyEndpoint: return "endpoint " + a.endpoint.name;
    case PlannedAction::Kind::kDeleteWorkload: return "delete " + a.name;
    case PlannedAction::Kind::kApplyJob: return "job " + a.job.name;
    case PlannedAction::Kind::kDeleteJob: return "delete job";
    case PlannedAction::Kind::kApplyDisruptionBudget: return "budget " + a.budget.name;
  }
  return "?";
}

Plan step(World w) {
  Json obj = w.object;
  obj["status"] = api::status_to_json(w.status);
  auto in = read_model(obj);
  EXPECT_TRUE(in.ok()) << in.error().to_string();
  return plan_model(*in, w.ob, ctx(w.now));
}

StagePhase phase_of(const api::InferenceModelStatus& s) {
  return s.stage ? s.stage->phase : StagePhase::kIdle;
}

void annotate(World& w, const std::string& key, const std::string& value) {
  w.object["metadata"]["annotations"][key] = value;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      {"IdleWithNothingToDoStaysIdleAndDoesNothing",
       [] {
         World w = idle_world();
         w.object["spec"]["serving"]["weightFormat"] = "fp16";
         w.object["spec"]["artifact"]["path"] = "glm/fp16";
         return w;
       },
       StagePhase::kIdle,
       {},
       {},
       "Deployed"},
      {"IdleStartsTheStageWithItsCanaryAndEndpoints",
       idle_world,
       StagePhase::kDeploying,
       {"apply glm-canary x1", "endpoint glm-stable", "endpoint glm-canary"},
       {"StageStarted"},
       "Deploying"},
      {"IdleWaitsForAStableThatIsNotFullyReady",
       [] {
         World w = idle_world();
         w.ob.stable.ready_replicas = 1;
         return w;
       },
       // The steady state's own "Deploying" (stable still rolling) says more than WaitingForStable.
       StagePhase::kIdle,
       {},
       {},
       "Deploying"},
      {"IdleHoldsWhilePaused",
       [] {
         World w = idle_world();
         annotate(w, "serving.infergate.dev/paused", "true");
         return w;
       },
       StagePhase::kIdle,
       {},
       {},
       "Paused"},
      {"IdleAfterAnAbortStartsNothing",
       [] {
         World w = idle_world();
         w.status.control.halted = true;
         w.status.control.failed_for = api::revision(the_stage().to);
         return w;
       },
       StagePhase::kIdle,
       {},
       {},
       "Aborted"},
      {"IdleNeverRetriesAFailedRevision",
       [] {
         World w = idle_world();
         w.status.failed_revisions = {the_stage().revision};
         w.status.control.failed_for = api::revision(the_stage().to);
         return w;
       },
       StagePhase::kIdle,
       {},
       {},
       "RevisionFailed"},
      {"IdleRefusesAStageThatDoesNotFit",
       [] {
         World w = idle_world();
         CapacityVerdict v;
         v.fits = false;
         v.reason = "KvCacheTooLarge";
         v.message = "needs 90 GiB of 80 GiB";
         w.ob.stage_capacity = v;
         return w;
       },
       StagePhase::kIdle,
       {},
       {"KvCacheTooLarge"},
       "KvCacheTooLarge"},
      {"IdleRefusesAStageWhoseThresholdTheEngineCannotMeasure",
       [] {
         World w = idle_world();
         // llama-server's /metrics has no latency histogram (vLLM's and SGLang's are read).
         w.object["spec"]["engine"] = {{"kind", "llamacpp"},
                                       {"image", "ghcr.io/ggml-org/llama.cpp:server-b6500"},
                                       {"modelFile", "glm.gguf"}};
         w.object["spec"]["rollout"]["gates"] = {{"performance", {{"maxTTFTP95Ratio", 1.5}}}};
         return w;
       },
       StagePhase::kIdle,
       {},
       {},
       "GateNotMeasurable"},
      {"IdleWithoutSurgeShrinksStableFirstAndTheCanaryWaitsForThePod",
       [] {
         World w = idle_world();
         w.object["spec"]["rollout"]["canary"]["surge"] = false;
         w.ob.stable.surge = false;
         return w;
       },
       StagePhase::kDeploying,
       {"apply glm x1", "apply glm-canary x0", "endpoint glm-stable", "endpoint glm-canary"},
       {"StageStarted"},
       "Deploying"},
      {"DeployingWithoutPodsStaysDeploying",
       [] {
         World w = stage_world(StagePhase::kDeploying);
         w.ob.canary.pods.clear();
         w.ob.canary.ready_replicas = 0;
         return w;
       },
       StagePhase::kDeploying,
       {},
       {},
       "Deploying"},
      {"DeployingWithPodsVerifyingMovesToVerifying",
       [] {
         return stage_world(StagePhase::kDeploying, [](platform::PodState& p) {
           p.ready = false;
           p.verify.phase = platform::VerifyState::Phase::kRunning;
         });
       },
       StagePhase::kVerifying,
       {},
       {},
       "Verifying"},
      {"VerifiedAndReadyOpensTheAnalysisWindow",
       [] { return stage_world(StagePhase::kVerifying); },
       StagePhase::kAnalyzing,
       {},
       {"AnalysisStarted"},
       "Analyzing"},
      {"AnalyzingInsideTheWindowWaitsAndDoesNothing",
       [] { return stage_world(StagePhase::kAnalyzing); },
       StagePhase::kAnalyzing,
       {},
       {},
       "Analyzing"},
      {"AnalyzingPastTheWindowWithEveryGateClearPromotes",
       [] {
         World w = stage_world(StagePhase::kAnalyzing);
         w.now = t0() + 61s;
         return w;
       },
       StagePhase::kPromoting,
       {"apply glm-canary x0"},
       {"Promoting"},
       "Promoting"},
      {"AManualPromoteSkipsTheRestOfTheWindow",
       [] {
         World w = stage_world(StagePhase::kAnalyzing);
         annotate(w, "serving.infergate.dev/promote", the_stage().revision);
         return w;
       },
       StagePhase::kPromoting,
       {"apply glm-canary x0"},
       {"Promoting"},
       "Promoting"},
      {"ARefusedVerificationRollsBackAtOnce",
       [] {
         return stage_world(StagePhase::kVerifying, [](platform::PodState& p) {
           p.ready = false;
           p.verify.phase = platform::VerifyState::Phase::kFailed;
           p.verify.exit_code = 5;
           p.verify.termination_message = kTampered;
         });
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"RolledBack"},
       "RollingBack"},
      {"ACrashLoopingCanaryRollsBackBeforeItsDeadline",
       [] {
         return stage_world(StagePhase::kVerifying, [](platform::PodState& p) {
           p.ready = false;
           p.waiting_reason = "CrashLoopBackOff";
           p.restarts = 4;
           p.recent_restarts = 4;
         });
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"RolledBack"},
       "RollingBack"},
      {"AnUnschedulableCanaryWaitsAndSaysWhyOnce",
       [] {
         return stage_world(StagePhase::kDeploying, [](platform::PodState& p) {
           p.ready = false;
           p.phase = platform::PodState::Phase::kPending;
           p.verify = platform::VerifyState{};
           p.unschedulable = true;
           p.schedule_message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.";
         });
       },
       StagePhase::kVerifying,
       {},
       {"CanaryUnschedulable"},
       "Unschedulable"},
      {"ACanaryPodRefusedByAdmissionFailsTheStageAtOnce",
       [] {
         World w = stage_world(StagePhase::kDeploying);
         w.ob.canary.pods.clear();
         w.ob.canary.ready_replicas = 0;
         w.ob.canary.failure_reason = "FailedCreate";
         w.ob.canary.failure_message = "pods \"glm-canary-x\" is forbidden: violates PodSecurity";
         return w;
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"RolledBack"},
       "RollingBack"},
      {"TheProgressDeadlineRollsBackACanaryThatNeverGotReady",
       [] {
         World w = stage_world(StagePhase::kVerifying, [](platform::PodState& p) { p.ready = false; });
         w.now = t0() + 601s;
         return w;
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"RolledBack"},
       "RollingBack"},
      {"AnAbortRollsBackAndHalts",
       [] {
         World w = stage_world(StagePhase::kAnalyzing);
         annotate(w, "serving.infergate.dev/abort", "1");
         return w;
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"AbortRequested", "Aborted"},
       "RollingBack"},
      {"WithoutAutoRollbackAFailedGateKeepsTheCanary",
       [] {
         World w = stage_world(StagePhase::kVerifying, [](platform::PodState& p) {
           p.ready = false;
           p.verify.phase = platform::VerifyState::Phase::kFailed;
           p.verify.exit_code = 5;
           p.verify.termination_message = kTampered;
         });
         w.object["spec"]["rollout"]["autoRollback"] = false;
         return w;
       },
       StagePhase::kFailed,
       {},
       {"GateFailed"},
       "DigestMismatch"},
      {"AFailedStageWaitsForAPerson",
       [] {
         World w = stage_world(StagePhase::kFailed);
         w.status.stage->failure_reason = "DigestMismatch";
         w.object["spec"]["rollout"]["autoRollback"] = false;
         return w;
       },
       StagePhase::kFailed,
       {},
       {},
       "DigestMismatch"},
      {"AFailedStageRollsBackOnAbort",
       [] {
         World w = stage_world(StagePhase::kFailed);
         w.object["spec"]["rollout"]["autoRollback"] = false;
         annotate(w, "serving.infergate.dev/abort", "1");
         return w;
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {"Aborted"},
       "RollingBack"},
      {"AFailedStageRetriedStartsOverInPlace",
       [] {
         World w = stage_world(StagePhase::kFailed);
         w.object["spec"]["rollout"]["autoRollback"] = false;
         annotate(w, "serving.infergate.dev/retry", "1");
         return w;
       },
       StagePhase::kDeploying,
       {"endpoint glm-stable", "endpoint glm-canary", "apply glm-canary x1"},
       {"RetryRequested", "Superseded", "StageStarted"},
       "Deploying"},
      {"ASpecChangedMidStageSupersedesItAndStartsTheNewOne",
       [] {
         World w = stage_world(StagePhase::kAnalyzing);
         w.object["spec"]["serving"]["weightFormat"] = "int4";
         w.object["spec"]["artifact"]["path"] = "glm/int4";
         return w;
       },
       StagePhase::kDeploying,
       {"apply glm-canary x1", "endpoint glm-stable", "endpoint glm-canary"},
       {"Superseded", "StageStarted"},
       "Deploying"},
      {"ASpecRevertedMidStageRemovesTheCanary",
       [] {
         World w = stage_world(StagePhase::kAnalyzing);
         w.object["spec"]["serving"]["weightFormat"] = "fp16";
         w.object["spec"]["artifact"]["path"] = "glm/fp16";
         return w;
       },
       StagePhase::kIdle,
       {"delete glm-canary"},
       {"Superseded"},
       ""},
      {"RollingBackWaitsForTheCanaryToGo",
       [] {
         World w = stage_world(StagePhase::kRollingBack);
         w.status.stage->outcome = "RolledBack";
         w.status.stage->failure_reason = "DigestMismatch";
         return w;
       },
       StagePhase::kRollingBack,
       {"delete glm-canary"},
       {},
       "RollingBack"},
      {"RollingBackEndsOnceTheCanaryIsGoneAndSaysWhyNothingStarts",
       [] {
         World w = stage_world(StagePhase::kRollingBack);
         w.status.stage->outcome = "RolledBack";
         w.status.stage->failure_reason = "DigestMismatch";
         w.status.failed_revisions = {the_stage().revision};
         w.status.control.failed_for = api::revision(the_stage().to);
         w.ob.canary = platform::WorkloadState{};
         return w;
       },
       StagePhase::kIdle,
       {},
       {"RollbackComplete"},
       "RevisionFailed"},
      {"PromotingWaitsUntilStableRunsTheCanarysConfiguration",
       [] {
         World w = stage_world(StagePhase::kPromoting);
         w.ob.canary = running(the_stage().to, api::Track::kCanary, 0, true);
         return w;
       },
       StagePhase::kPromoting,
       {"apply glm x2"},
       {},
       "Promoting"},
      {"PromotingIsCommittedEvenIfTheSpecChanges",
       [] {
         World w = stage_world(StagePhase::kPromoting);
         w.ob.canary = running(the_stage().to, api::Track::kCanary, 0, true);
         w.object["spec"]["serving"]["weightFormat"] = "int4";
         w.object["spec"]["artifact"]["path"] = "glm/int4";
         return w;
       },
       StagePhase::kPromoting,
       {"apply glm x2"},
       {},
       "Promoting"},
      {"PromotingEndsWhenStableRunsItAndTheCanaryGoes",
       [] {
         World w = stage_world(StagePhase::kPromoting);
         w.ob.canary = running(the_stage().to, api::Track::kCanary, 0, true);
         w.ob.stable = running(the_stage().to, api::Track::kStable, 2, true);
         return w;
       },
       StagePhase::kIdle,
       {"delete glm-canary"},
       {"Promoted", "RolloutComplete"},
       "Deployed"},
      {"APromotionWhoseCanaryConfigIsUnreadableLosesTheStageNotTheStable",
       [] {
         World w = stage_world(StagePhase::kPromoting);
         w.status.canary->config.pod_config = Json();
         return w;
       },
       StagePhase::kDeploying,
       {"apply glm-canary x1", "endpoint glm-stable", "endpoint glm-canary"},
       {"StageStarted"},
       "Deploying"},
  };
  return kRows;
}

class Transition : public ::testing::TestWithParam<Row> {};

TEST_P(Transition, LandsInItsPhaseWithItsActionsAndEvents) {
  const Row& row = GetParam();
  const Plan p = step(row.world());
  EXPECT_EQ(api::to_string(phase_of(p.status)), api::to_string(row.next));
  std::set<std::string> actions;
  for (const auto& a : p.actions) actions.insert(describe(a));
  EXPECT_EQ(actions, row.actions);
  std::set<std::string> events;
  for (const auto& e : p.events) events.insert(e.reason);
  for (const auto& want : row.events) EXPECT_TRUE(events.count(want)) << "missing event " << want;
  if (!row.progressing.empty()) {
    const api::Condition* c = api::find_condition(p.status.conditions, api::condition::kProgressing);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->reason, row.progressing) << c->message;
  }
}

// A restarted operator has nothing but status: the same status and world give the same step. And a
// step that waits (same phase, nothing to do), read back from the status it wrote, writes nothing
// more and says nothing more: no condition flapping, no repeated event.
TEST_P(Transition, IsTheSameStepAfterARestartAndAWaitSettles) {
  const Row& row = GetParam();
  World w = row.world();
  const Plan first = step(w);
  const Plan again = step(w);
  EXPECT_EQ(api::status_to_json(first.status), api::status_to_json(again.status));
  EXPECT_EQ(first.events, again.events);
  if (phase_of(w.status) != row.next || !row.actions.empty()) return;
  w.status = first.status;
  const Plan settled = step(w);
  EXPECT_EQ(api::status_to_json(settled.status), api::status_to_json(first.status));
  EXPECT_TRUE(settled.events.empty()) << settled.events.front().reason;
}

TEST(RolloutMachine, ACanaryThatCannotBeCreatedRollsBackWithTheServersWords) {
  World w = stage_world(StagePhase::kDeploying);
  w.ob.canary.pods.clear();
  w.ob.canary.failure_reason = "FailedCreate";
  w.ob.canary.failure_message =
      "pods \"glm-canary-x\" is forbidden: violates PodSecurity \"restricted:latest\": "
      "restricted volume types (volume \"model-artifacts\" uses restricted volume type "
      "\"nfs\")";
  const Plan p = step(w);
  const api::Condition* rb = api::find_condition(p.status.conditions, api::condition::kRolledBack);
  ASSERT_NE(rb, nullptr);
  EXPECT_EQ(rb->reason, "CanaryNotCreated");
  EXPECT_NE(rb->message.find("violates PodSecurity"), std::string::npos) << rb->message;
  EXPECT_NE(rb->message.find("PersistentVolumeClaim bound to an NFS PersistentVolume"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(RolloutMachine, Transition, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& p) { return p.param.name; });

// The arithmetic of a canary that fits: every phase of a surge:false stage holds at most
// spec.replicas pods, and each side grows only into pods the other has released.
TEST(RolloutMachine, WithoutSurgeNoPhaseAsksForMorePodsThanStableHeld) {
  for (StagePhase phase :
       {StagePhase::kDeploying, StagePhase::kAnalyzing, StagePhase::kPromoting, StagePhase::kRollingBack}) {
    World w = stage_world(phase);
    w.object["spec"]["replicas"] = 3;
    w.object["spec"]["rollout"]["canary"]["surge"] = false;
    w.ob.stable = running(stable_config_fp16(), api::Track::kStable, 2, false);
    w.ob.canary = running(the_stage().to, api::Track::kCanary, 1, false);
    w.status.stage->outcome = "RolledBack";
    const Plan p = step(w);
    int32_t stable = w.ob.stable.replicas, canary = w.ob.canary.replicas;
    for (const auto& a : p.actions) {
      if (a.kind != PlannedAction::Kind::kApplyWorkload) continue;
      (a.workload.track == api::Track::kStable ? stable : canary) = a.workload.replicas;
      EXPECT_FALSE(a.workload.surge) << api::to_string(phase);
    }
    for (const auto& a : p.actions) {
      if (a.kind == PlannedAction::Kind::kDeleteWorkload) canary = 0;
    }
    // What the platform may create: the new desired counts, while the old pods still exist.
    EXPECT_LE(std::max(stable, w.ob.stable.replicas) + std::max(canary, w.ob.canary.replicas), 3)
        << api::to_string(phase);
  }
}

}  // namespace
}  // namespace infergate::op::controllers
