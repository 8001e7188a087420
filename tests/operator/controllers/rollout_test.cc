// The staged rollout end to end through the reconciler, on an in-memory platform with a fake clock:
// stages in order, each gate failing in its own way, promotion, rollback, manual control, restarts.
#include <gtest/gtest.h>

#include <algorithm>

#include "controllers/fake_platform.h"
#include "infergate/operator/api/conditions.h"
#include "infergate/operator/controllers/inference_model_controller.h"

namespace infergate::op::controllers {
namespace {

using namespace std::chrono_literals;
using op::testing::FakeModelStore;
using op::testing::FakePlatform;
using op::testing::FakePod;
using op::testing::RecordingEvents;

Json model() {
  return Json::parse(R"({
    "apiVersion": "serving.infergate.dev/v1alpha1", "kind": "InferenceModel",
    "metadata": {"name": "glm", "namespace": "models", "uid": "u-1", "generation": 1},
    "spec": {
      "replicas": 2,
      "artifact": {"volume": {"persistentVolumeClaim": {"claimName": "artifacts"}}, "path": "glm/fp16",
                   "trust": {"publicKeySecretRef": {"name": "keys"}, "expectName": "glm"}},
      "serving": {"weightFormat": "fp16", "kvCacheDtype": "fp16", "maxContextLength": 4096, "maxConcurrency": 8},
      "rollout": {"canary": {"replicas": 1, "analysisSeconds": 60}}
    }})");
}

class RecordingMetrics final : public RolloutMetrics {
 public:
  void record(const platform::ModelRef&, const RolloutEvent& e) override {
    std::lock_guard lock(mu_);
    events.push_back(e);
  }
  void set_version_drift(const platform::ModelRef&, int pods) override { drift = pods; }
  void forget(const platform::ModelRef&) override {}
  int count(RolloutEvent::Kind k, const std::string& outcome = "") const {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& e : events)
      n += e.kind == k && (outcome.empty() || e.outcome == outcome || e.reason == outcome);
    return n;
  }
  std::vector<RolloutEvent> events;
  int drift = -1;
  mutable std::mutex mu_;
};

class SequenceCapacity final : public CapacityChecker {
 public:
  std::function<std::optional<CapacityVerdict>(const api::PodConfig&)> fn = [](const api::PodConfig&) {
    return std::optional<CapacityVerdict>();
  };
  std::optional<CapacityVerdict> check(const api::PodConfig& c, const api::CapacityPlanningSpec&,
                                       int32_t) override {
    return fn(c);
  }
};

class Rollout : public ::testing::Test {
 protected:
  Rollout() {
    platform_.clock = &clock_;
    rebuild();
  }

  void rebuild() {
    ControllerOptions o;
    o.rollout_metrics = &metrics_;
    reconciler_ =
        std::make_unique<InferenceModelReconciler>(store_, platform_, events_, capacity_, clock_, o);
  }
  reconcile::Action step() {
    auto r = reconciler_->reconcile({"models", "glm"});
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? *r : reconcile::Action::await_change();
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) step();
  }
  // Deploys `model()` and lets it reach steady state.
  void deploy(std::function<void(Json&)> edit = {}) {
    Json m = model();
    if (edit) edit(m);
    store_.put(m);
    steps(3);
    ASSERT_TRUE(status().contains("stable")) << status().dump(2);
    ASSERT_EQ(status()["stable"]["summary"], "fp16/fp16 ctx=4096 x8");
  }
  // Changes the spec (generation + 1).
  void change(const std::function<void(Json&)>& edit) {
    Json m = store_.object();
    m["metadata"]["generation"] = m["metadata"]["generation"].get<int>() + 1;
    edit(m["spec"]);
    store_.put(m);
  }
  void annotate(const std::string& key, const std::string& value) {
    Json m = store_.object();
    if (value.empty()) {
      m["metadata"]["annotations"].erase(key);
    } else {
      m["metadata"]["annotations"][key] = value;
    }
    store_.put(m);
  }
  static void to_int8(Json& spec) {
    spec["serving"]["weightFormat"] = "int8";
    spec["serving"]["kvCacheDtype"] = "int8";
    spec["artifact"]["path"] = "glm/int8";
  }
  Json status() const { return store_.status(); }
  Json condition(const std::string& type) const {
    for (const auto& c : status().value("conditions", Json::array())) {
      if (c["type"] == type) return c;
    }
    return Json();
  }
  std::string phase() const { return status().contains("stage") ? status()["stage"].value("phase", "") : ""; }
  std::string stage_name() const {
    return status().contains("stage") ? status()["stage"].value("name", "") : "";
  }

  FakeClock clock_;
  FakeModelStore store_;
  FakePlatform platform_;
  RecordingEvents events_;
  SequenceCapacity capacity_;
  RecordingMetrics metrics_;
  std::unique_ptr<InferenceModelReconciler> reconciler_;
};

TEST_F(Rollout, TheFirstDeploymentGoesStraightToStable) {
  deploy();
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_TRUE(status()["stable"].contains("podConfig"));
}

TEST_F(Rollout, AReconcileThatThrewIsShownOnTheObjectOnceAndTheRestOfTheStatusIsKept) {
  deploy();
  const Json stable = status()["stable"];
  const std::string what = "type_error.302: type must be string, but is number";
  for (int i = 0; i < 2; ++i) reconciler_->record_failure({"models", "glm"}, what);
  for (const char* type : {"Ready", "Progressing"}) {
    EXPECT_EQ(condition(type)["status"], "False") << type;
    EXPECT_EQ(condition(type)["reason"], "ReconcileError") << type;
    EXPECT_NE(condition(type)["message"].get<std::string>().find(what), std::string::npos) << type;
  }
  EXPECT_EQ(status()["stable"], stable) << "a failed attempt changes nothing else";
  int warnings = 0;
  for (const auto& e : events_.events()) warnings += e.reason == "ReconcileError" ? 1 : 0;
  EXPECT_EQ(warnings, 1) << "announced once, not on every retry";
  step();  // a reconcile that works again says so
  EXPECT_EQ(condition("Ready")["status"], "True") << status().dump(2);
}

TEST_F(Rollout, AReconcileThatThrewOnAStatusThatIsNotOursReplacesOnlyItsConditions) {
  Json m = model();
  m["status"] = {{"replicas", "two"}, {"note", "left by a person"}};
  store_.put(m);
  reconciler_->record_failure({"models", "glm"}, "boom");
  EXPECT_EQ(status()["replicas"], "two");
  EXPECT_EQ(status()["note"], "left by a person");
  EXPECT_EQ(condition("Ready")["reason"], "ReconcileError") << status().dump(2);
}

TEST_F(Rollout, WeightsThenKvCacheEachThroughACanaryThenPromoted) {
  deploy();
  change(to_int8);
  step();
  // Stage 1: weights. The canary runs int8 weights with the stable fp16 KV; stable is untouched.
  EXPECT_EQ(stage_name(), "weights");
  auto canary = platform_.workload("glm-canary");
  ASSERT_TRUE(canary.has_value());
  EXPECT_EQ(canary->summary, "int8/fp16 ctx=4096 x8");
  EXPECT_EQ(canary->replicas, 1);
  EXPECT_EQ(platform_.workload("glm")->summary, "fp16/fp16 ctx=4096 x8");
  EXPECT_EQ(platform_.workload("glm")->replicas, 2);
  EXPECT_TRUE(events_.has("StageStarted"));
  step();
  EXPECT_EQ(phase(), "Analyzing");
  EXPECT_EQ(condition("Progressing")["reason"], "Analyzing");
  // Nothing promotes before the window is over.
  clock_.advance(59s);
  step();
  EXPECT_EQ(phase(), "Analyzing");
  clock_.advance(2s);
  step();  // -> Promoting: the canary gives its pod up first (room for stable's surge pod)
  EXPECT_EQ(phase(), "Promoting");
  EXPECT_EQ(platform_.workload("glm-canary")->replicas, 0);
  EXPECT_EQ(platform_.workload("glm")->summary, "fp16/fp16 ctx=4096 x8");
  step();  // stable takes the canary's configuration, never more than stable + canary pods
  EXPECT_EQ(platform_.workload("glm")->summary, "int8/fp16 ctx=4096 x8");
  EXPECT_EQ(platform_.workload("glm")->replicas, 2);
  EXPECT_TRUE(platform_.workload("glm")->surge);
  step();  // stable rolled out -> promoted, canary gone
  EXPECT_EQ(status()["stable"]["summary"], "int8/fp16 ctx=4096 x8");
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_TRUE(events_.has("Promoted"));
  // Stage 2: KV cache.
  step();
  EXPECT_EQ(stage_name(), "kvCache");
  EXPECT_EQ(platform_.workload("glm-canary")->summary, "int8/int8 ctx=4096 x8");
  step();
  clock_.advance(61s);
  steps(4);
  EXPECT_EQ(status()["stable"]["summary"], "int8/int8 ctx=4096 x8");
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(condition("Progressing")["reason"], "Deployed");
  EXPECT_TRUE(events_.has("RolloutComplete"));
  const Json h = status()["history"];
  ASSERT_GE(h.size(), 3u);
  EXPECT_EQ(h[h.size() - 2]["outcome"], "Promoted");
  EXPECT_EQ(h[h.size() - 2]["stage"], "weights");
  EXPECT_EQ(h.back()["outcome"], "Promoted");
  EXPECT_EQ(h.back()["stage"], "kvCache");
  EXPECT_EQ(metrics_.count(RolloutEvent::Kind::kStageFinished, "Promoted"), 2);
  EXPECT_EQ(metrics_.count(RolloutEvent::Kind::kRolloutFinished, "Completed"), 1);
  // Steady again: reconciling writes nothing.
  const int writes = store_.writes();
  steps(5);
  EXPECT_EQ(store_.writes(), writes);
}

TEST_F(Rollout, AWaitingStageReconciledAgainWritesNothing) {
  deploy();
  change(to_int8);
  steps(2);
  ASSERT_EQ(phase(), "Analyzing");
  const int writes = store_.writes();
  const size_t log = platform_.log().size();
  steps(20);
  EXPECT_EQ(store_.writes(), writes);
  EXPECT_EQ(platform_.log().size(), log);
}

TEST_F(Rollout, ATamperedCanaryIsRolledBackWithTheAgentsReasonAndNotRetried) {
  deploy();
  platform_.pods = [](const platform::WorkloadSpec& w, int) {
    if (w.track == api::Track::kCanary) {
      return FakePod{
          5,
          R"({"reason":"DigestMismatch","message":"content differs","file":"model-00001.safetensors","expected":"aa","actual":"bb","exitCode":5})",
          false, "", 0};
    }
    return FakePod{0, op::testing::verified_verdict(), true, "", 0};
  };
  change(to_int8);
  step();  // stage starts
  step();  // verification fails -> rolling back
  EXPECT_EQ(phase(), "RollingBack");
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  const Json rb = condition("RolledBack");
  EXPECT_EQ(rb["status"], "True");
  EXPECT_EQ(rb["reason"], "DigestMismatch");
  EXPECT_NE(rb["message"].get<std::string>().find("model-00001.safetensors"), std::string::npos) << rb;
  EXPECT_TRUE(events_.has("RolledBack"));
  EXPECT_EQ(metrics_.count(RolloutEvent::Kind::kVerificationFailure, "DigestMismatch"), 1);
  clock_.advance(2s);
  step();  // canary gone -> rollback complete
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_EQ(status()["history"].back()["outcome"], "RolledBack");
  EXPECT_EQ(metrics_.count(RolloutEvent::Kind::kRollbackDuration), 1);
  EXPECT_GE(metrics_.events.back().kind == RolloutEvent::Kind::kRolloutFinished, true);
  // Stable untouched throughout.
  EXPECT_EQ(platform_.workload("glm")->summary, "fp16/fp16 ctx=4096 x8");
  EXPECT_EQ(platform_.workload("glm")->replicas, 2);
  // The failed revision is not retried...
  const int applies = platform_.canary_applies();
  steps(5);
  EXPECT_EQ(platform_.canary_applies(), applies);
  EXPECT_EQ(condition("Progressing")["reason"], "RevisionFailed");
  ASSERT_EQ(status()["failedRevisions"].size(), 1u);
  // ...until the spec changes.
  platform_.pods = [](const platform::WorkloadSpec&, int) {
    return FakePod{0, op::testing::verified_verdict(), true, "", 0};
  };
  change([](Json& s) { s["artifact"]["path"] = "glm/int8-r2"; });
  step();
  EXPECT_EQ(stage_name(), "weights");
  EXPECT_EQ(platform_.workload("glm-canary")->artifact.path, "glm/int8-r2");
  EXPECT_FALSE(status().contains("failedRevisions"));
}

TEST_F(Rollout, AQualityGateFailureRollsBackWithTheNumbers) {
  deploy([](Json& m) {
    m["spec"]["rollout"]["gates"] = {
        {"quality", {{"suite", "default"}, {"maxMeanKL", 0.01}, {"minTop1Agreement", 0.9}}}};
  });
  platform_.jobs = [](const platform::JobSpec&) {
    platform::JobState j;
    j.phase = platform::JobState::Phase::kFailed;
    j.terminated = true;
    j.exit_code = 1;
    j.termination_message =
        R"({"suite":"default","passed":false,"metrics":{"top1_agreement":0.95,"mean_kl":0.2},"failed":[{"metric":"mean_kl","value":0.2,"threshold":0.01,"op":"<="}]})";
    return j;
  };
  change(to_int8);
  steps(2);  // stage starts, canary ready -> analysis + eval job
  auto job = platform_.job(api::quality_job_name("glm", status()["stage"]["revision"].get<std::string>()));
  ASSERT_TRUE(job.has_value());
  const auto& args = job->container.args;
  EXPECT_NE(std::find(args.begin(), args.end(), "http://glm-stable.svc"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "http://glm-canary.svc"), args.end());
  step();  // the job's result -> rollback
  EXPECT_EQ(phase(), "RollingBack");
  const Json rb = condition("RolledBack");
  EXPECT_EQ(rb["reason"], "QualityThresholdFailed");
  EXPECT_NE(rb["message"].get<std::string>().find("mean_kl 0.2 > 0.01"), std::string::npos) << rb;
  EXPECT_EQ(platform_.job_count(), 0u);
  step();
  EXPECT_EQ(status()["history"].back()["outcome"], "RolledBack");
}

TEST_F(Rollout, AnEvalJobThatCannotPullItsImageNeverPromotes) {
  deploy([](Json& m) { m["spec"]["rollout"]["gates"] = {{"quality", {{"maxMeanKL", 0.01}}}}; });
  platform_.jobs = [](const platform::JobSpec&) {
    platform::JobState j;
    j.reason = "ImagePullBackOff";
    j.message = "Back-off pulling image";
    return j;
  };
  change(to_int8);
  steps(3);
  EXPECT_EQ(condition("RolledBack")["reason"], "EvalJobCannotRun");
  EXPECT_EQ(platform_.workload("glm")->summary, "fp16/fp16 ctx=4096 x8");
}

std::string metrics_text(double fast, double slow, double requests, double errors) {
  // `fast` observations at <= 0.05 s, `slow` at (0.5, 0.75].
  auto hist = [&](const std::string& name) {
    std::string s;
    for (auto [le, c] : std::vector<std::pair<std::string, double>>{
             {"0.05", fast}, {"0.5", fast}, {"0.75", fast + slow}, {"+Inf", fast + slow}}) {
      s += name + "_bucket{le=\"" + le + "\"} " + std::to_string(c) + "\n";
    }
    s += name + "_sum " + std::to_string(0.03 * fast + 0.6 * slow) + "\n" + name + "_count " +
         std::to_string(fast + slow) + "\n";
    return s;
  };
  return hist("infergate_time_to_first_token_seconds") + hist("infergate_time_per_output_token_seconds") +
         "infergate_requests_total " + std::to_string(requests) +
         "\ninfergate_request_errors_total{reason=\"x\"} " + std::to_string(errors) + "\n";
}

TEST_F(Rollout, ASlowCanaryFailsThePerformanceGateMeasuredOverTheWindow) {
  deploy([](Json& m) {
    m["spec"]["rollout"]["gates"] = {{"performance", {{"maxTTFTP95Ratio", 1.5}, {"maxErrorRate", 0.05}}}};
  });
  // Scrapes: each pod's counters grow by 100 requests between the start and end of the window; the
  // canary's are slow. Before the window the canary was fast (its warm-up must not count).
  std::map<std::string, int> scrapes;
  platform_.http = [&](const std::string& url) -> Result<platform::HttpResponse> {
    const int n = scrapes[url]++;
    const bool canary = url.find("glm-canary") != std::string::npos;
    if (n == 0) return platform::HttpResponse{200, metrics_text(50, 0, 50, 0)};
    return platform::HttpResponse{200, canary ? metrics_text(50, 100, 150, 0) : metrics_text(150, 0, 150, 0)};
  };
  change(to_int8);
  steps(2);
  ASSERT_EQ(phase(), "Analyzing");
  clock_.advance(61s);
  step();
  EXPECT_EQ(phase(), "RollingBack") << status().dump(2);
  const Json rb = condition("RolledBack");
  EXPECT_EQ(rb["reason"], "PerformanceThresholdFailed");
  EXPECT_NE(rb["message"].get<std::string>().find("ttft_p95_ratio"), std::string::npos) << rb;
  // The gate's numbers are in the stage's gate results too.
  bool found = false;
  const Json gates = status()["stage"]["gateResults"];
  for (const auto& g : gates) {
    if (g["gate"] == "performance") {
      found = true;
      EXPECT_EQ(g["outcome"], "Failed");
      EXPECT_GT(g["measurements"]["ttft_p95_ratio"].get<double>(), 1.5);
      EXPECT_EQ(g["measurements"]["requests_canary"].get<double>(), 100);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(Rollout, ACanaryAsFastAsStablePassesThePerformanceGate) {
  deploy([](Json& m) { m["spec"]["rollout"]["gates"] = {{"performance", {{"maxTTFTP95Ratio", 1.5}}}}; });
  std::map<std::string, int> scrapes;
  platform_.http = [&](const std::string& url) -> Result<platform::HttpResponse> {
    const int n = scrapes[url]++;
    return platform::HttpResponse{200, n == 0 ? metrics_text(10, 0, 10, 0) : metrics_text(110, 0, 110, 0)};
  };
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  steps(2);
  clock_.advance(61s);
  steps(3);
  EXPECT_EQ(status()["stable"]["summary"], "fp16/int8 ctx=4096 x8");
}

TEST_F(Rollout, NoTrafficInTheWindowIsInconclusiveAndRollsBack) {
  deploy([](Json& m) { m["spec"]["rollout"]["gates"] = {{"performance", {{"maxTTFTP95Ratio", 1.5}}}}; });
  platform_.http = [&](const std::string&) -> Result<platform::HttpResponse> {
    return platform::HttpResponse{200, metrics_text(10, 0, 10, 0)};  // nothing moves
  };
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  steps(2);
  clock_.advance(61s);
  step();
  EXPECT_EQ(condition("RolledBack")["reason"], "NotEnoughTraffic");
}

TEST_F(Rollout, WithoutSurgeTheCanaryTakesAStablePodAndStableNeverGoesBelowTheRest) {
  deploy([](Json& m) {
    m["spec"]["replicas"] = 3;
    m["spec"]["rollout"]["canary"]["surge"] = false;
  });
  EXPECT_FALSE(platform_.workload("glm")->surge) << "no room for a surge pod: updates remove one first";
  change([](Json& spec) {
    spec["serving"]["weightFormat"] = "int8";
    spec["artifact"]["path"] = "glm/int8";
  });
  // Pods held (stable + canary) after every step: never more than the 3 stable held, never fewer
  // than 2 serving stable pods.
  auto held = [&] {
    auto stable = platform_.workload("glm");
    auto canary = platform_.workload("glm-canary");
    return (stable ? stable->replicas : 0) + (canary ? canary->replicas : 0);
  };
  step();
  EXPECT_EQ(platform_.workload("glm")->replicas, 2);
  EXPECT_EQ(platform_.workload("glm-canary")->replicas, 0) << "the canary waits for stable's pod to go";
  EXPECT_LE(held(), 3);
  step();
  EXPECT_EQ(platform_.workload("glm-canary")->replicas, 1) << "the released pod's GPUs go to the canary";
  EXPECT_LE(held(), 3);
  step();  // canary verified and ready: the window opens
  // What stands for spec.replicas (an HPA's current count) is still 3: 2 stable pods and the canary's.
  EXPECT_EQ(status()["replicas"], 3) << status().dump(2);
  clock_.advance(61s);
  for (int i = 0; i < 8 && status().contains("stage"); ++i) {
    step();
    EXPECT_LE(held(), 3) << "step " << i;
    EXPECT_GE(platform_.workload("glm")->replicas, 2) << "step " << i;
  }
  EXPECT_EQ(status()["stable"]["weightFormat"], "int8") << status().dump(2);
  EXPECT_EQ(platform_.workload("glm")->replicas, 3);
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(status()["history"].back()["outcome"], "Promoted") << status()["history"].dump(1);
}

TEST_F(Rollout, PausedHoldsAStageAndResumeLetsItPromote) {
  deploy();
  annotate("serving.infergate.dev/paused", "true");
  change(to_int8);
  step();
  EXPECT_FALSE(status().contains("stage")) << "a paused rollout starts no stage";
  EXPECT_EQ(condition("Progressing")["reason"], "Paused");
  annotate("serving.infergate.dev/paused", "");
  steps(2);
  annotate("serving.infergate.dev/paused", "true");
  clock_.advance(120s);
  steps(3);
  EXPECT_EQ(phase(), "Analyzing") << "paused: no promotion even with the window over";
  annotate("serving.infergate.dev/paused", "");
  steps(3);
  EXPECT_EQ(status()["stable"]["weightFormat"], "int8");
}

TEST_F(Rollout, PromoteNowSkipsTheRestOfTheWindow) {
  deploy();
  change(to_int8);
  steps(2);
  ASSERT_EQ(phase(), "Analyzing");
  annotate("serving.infergate.dev/promote", "not-this-revision");
  step();
  EXPECT_EQ(phase(), "Analyzing");
  annotate("serving.infergate.dev/promote", status()["stage"]["revision"].get<std::string>());
  steps(3);
  EXPECT_EQ(status()["stable"]["weightFormat"], "int8");
  EXPECT_EQ(status()["history"].back()["reason"], "PromotedManually");
}

TEST_F(Rollout, AbortRollsBackAndHaltsThenRetryStartsTheStageOver) {
  deploy();
  change(to_int8);
  steps(2);
  const std::string rev = status()["stage"]["revision"];
  annotate("serving.infergate.dev/abort", "1");
  step();
  EXPECT_EQ(phase(), "RollingBack");
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  steps(3);
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_EQ(status()["history"].back()["outcome"], "Aborted");
  EXPECT_EQ(condition("Progressing")["reason"], "Aborted");
  EXPECT_FALSE(status().contains("failedRevisions")) << "an abort is not a failed gate";
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  annotate("serving.infergate.dev/retry", "1");
  step();
  EXPECT_EQ(stage_name(), "weights");
  EXPECT_EQ(status()["stage"]["revision"], rev);
  EXPECT_TRUE(platform_.workload("glm-canary").has_value());
  // Aborting again works (a new token).
  annotate("serving.infergate.dev/abort", "2");
  steps(3);
  EXPECT_EQ(status()["history"].back()["outcome"], "Aborted");
}

TEST_F(Rollout, ARestartedOperatorResumesTheStageWithoutASecondCanary) {
  deploy();
  change(to_int8);
  steps(2);
  ASSERT_EQ(phase(), "Analyzing");
  const Json before = status()["stage"];
  const int applies = platform_.canary_applies();
  rebuild();  // a new process: nothing in memory, everything from status and names
  clock_.advance(30s);
  steps(3);
  EXPECT_EQ(status()["stage"]["revision"], before["revision"]);
  EXPECT_EQ(status()["stage"]["analysisStartedAt"], before["analysisStartedAt"]);
  EXPECT_EQ(platform_.canary_applies(), applies);
  clock_.advance(31s);
  steps(3);
  EXPECT_EQ(status()["stable"]["weightFormat"], "int8");
}

TEST_F(Rollout, ASpecChangedMidStageSupersedesItCleanly) {
  deploy([](Json& m) { m["spec"]["rollout"]["gates"] = {{"quality", {{"maxMeanKL", 0.01}}}}; });
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  steps(2);
  const std::string old_rev = status()["stage"]["revision"];
  ASSERT_TRUE(platform_.job(api::quality_job_name("glm", old_rev)).has_value());
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "fp8"; });
  step();
  EXPECT_EQ(stage_name(), "kvCache");
  EXPECT_NE(status()["stage"]["revision"], old_rev);
  EXPECT_EQ(platform_.workload("glm-canary")->summary, "fp16/fp8 ctx=4096 x8");
  EXPECT_FALSE(platform_.job(api::quality_job_name("glm", old_rev)).has_value());
  bool superseded = false;
  const Json history = status()["history"];
  for (const auto& h : history)
    superseded = superseded || (h["outcome"] == "Superseded" && h["revision"] == old_rev);
  EXPECT_TRUE(superseded);
  EXPECT_TRUE(events_.has("Superseded"));
}

TEST_F(Rollout, ASpecRevertedMidStageRemovesTheCanary) {
  deploy();
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  steps(2);
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "fp16"; });
  step();
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
}

TEST_F(Rollout, AStageThatDoesNotFitIsRefusedWithTheNumbers) {
  deploy();
  capacity_.fn = [](const api::PodConfig& c) -> std::optional<CapacityVerdict> {
    if (c.serving.max_context_length > 4096) {
      return CapacityVerdict{
          false, "KvCacheTooLarge", "needs 92.1 GiB of 80 GiB per GPU", {{"needGiB", 92.1}}};
    }
    return CapacityVerdict{true, "Fits", "needs 40.0 GiB of 80 GiB per GPU", {}};
  };
  change([](Json& s) { s["serving"]["maxContextLength"] = 131072; });
  step();
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(condition("CapacityFits")["status"], "False");
  EXPECT_NE(condition("CapacityFits")["message"].get<std::string>().find("92.1 GiB"), std::string::npos);
  EXPECT_EQ(condition("Progressing")["reason"], "KvCacheTooLarge");
}

TEST_F(Rollout, AStageThatCannotBeCheckedStartsWithCapacityUnknown) {
  deploy();
  capacity_.fn = [](const api::PodConfig&) -> std::optional<CapacityVerdict> {
    CapacityVerdict v{false, "GpuNotSpecified", "spec.capacityPlanning.gpu (or gpuMemory) is not set", {}};
    v.checked = false;
    return v;
  };
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  step();
  EXPECT_TRUE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(stage_name(), "kvCache");
  EXPECT_EQ(condition("CapacityFits")["status"], "Unknown");
  EXPECT_EQ(condition("CapacityFits")["reason"], "GpuNotSpecified");
  EXPECT_FALSE(events_.has("GpuNotSpecified"));
}

TEST_F(Rollout, AStageRefusedForCapacityCreatesNoCanaryAndWarnsOnce) {
  deploy();
  capacity_.fn = [](const api::PodConfig& c) -> std::optional<CapacityVerdict> {
    if (c.serving.max_concurrency > 8) {
      return CapacityVerdict{false, "KvCacheTooLarge", "needs 150.2 GiB of 140.4 GiB per GPU", {}};
    }
    return CapacityVerdict{true, "Fits", "needs 40.0 GiB of 140.4 GiB per GPU", {}};
  };
  change([](Json& s) { s["serving"]["maxConcurrency"] = 64; });
  steps(3);
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_EQ(condition("CapacityFits")["reason"], "KvCacheTooLarge");
  const auto evs = events_.events();
  EXPECT_EQ(
      std::count_if(evs.begin(), evs.end(), [](const auto& e) { return e.reason == "KvCacheTooLarge"; }), 1);
}

TEST_F(Rollout, WithoutAutoRollbackAFailedStageKeepsItsCanaryUntilAborted) {
  deploy([](Json& m) {
    m["spec"]["rollout"]["autoRollback"] = false;
    m["spec"]["rollout"]["gates"] = {{"quality", {{"maxMeanKL", 0.01}}}};
  });
  platform_.jobs = [](const platform::JobSpec&) {
    platform::JobState j;
    j.phase = platform::JobState::Phase::kFailed;
    j.reason = "DeadlineExceeded";
    return j;
  };
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int8"; });
  steps(4);
  EXPECT_EQ(phase(), "Failed");
  EXPECT_TRUE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(condition("Progressing")["status"], "False");
  EXPECT_EQ(condition("Progressing")["reason"], "EvalJobFailed");
  annotate("serving.infergate.dev/abort", "x");
  steps(2);
  EXPECT_FALSE(platform_.workload("glm-canary").has_value());
  EXPECT_EQ(status()["history"].back()["outcome"], "Aborted");
}

TEST_F(Rollout, ACanaryWhoseRuntimeKeepsCrashingFailsTheStage) {
  deploy();
  platform_.pods = [](const platform::WorkloadSpec& w, int) {
    if (w.track == api::Track::kCanary)
      return FakePod{0, op::testing::verified_verdict(), false, "CrashLoopBackOff", 4};
    return FakePod{0, op::testing::verified_verdict(), true, "", 0};
  };
  change([](Json& s) { s["serving"]["kvCacheDtype"] = "int4"; });
  steps(2);
  EXPECT_EQ(condition("RolledBack")["reason"], "CanaryNotServing");
}

TEST_F(Rollout, AStablePodThatRestartedFiveTimesOverAWeekIsHealthyThreeTimesInAMinuteIsACrashLoop) {
  deploy();
  int restarts = 0;
  platform_.pods = [&restarts](const platform::WorkloadSpec&, int i) {
    return FakePod{0, op::testing::verified_verdict(), true, "", i == 0 ? restarts : 0};
  };
  for (int day = 0; day < 5; ++day) {
    clock_.advance(std::chrono::hours(30));
    ++restarts;  // the kubelet restarted it; it runs again
    step();
    EXPECT_EQ(condition("StableHealthy")["status"], "True")
        << "restart " << restarts << ": " << status().dump();
  }
  // Now it dies on start: three restarts within a minute (the kubelet's back-off).
  platform_.pods = [&restarts](const platform::WorkloadSpec&, int i) {
    return FakePod{0, op::testing::verified_verdict(), i != 0, i == 0 ? "CrashLoopBackOff" : "",
                   i == 0 ? restarts : 0};
  };
  for (auto gap : {10s, 20s, 40s}) {
    clock_.advance(gap);
    ++restarts;
    step();
  }
  EXPECT_EQ(condition("StableHealthy")["status"], "False");
  EXPECT_EQ(condition("StableHealthy")["reason"], "CrashLoopBackOff");
}

TEST_F(Rollout, AnOperatorWithNewImagesLeavesStableAloneAndBringsThemThroughAnArtifactStage) {
  deploy();
  const auto before = platform_.workload("glm");
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->verify.image, "infergate/agent:0.1.0");
  // The operator restarts as a new release: other images.
  ControllerOptions o;
  o.rollout_metrics = &metrics_;
  o.images = {"infergate/agent:0.2.0", "infergate/runtime:0.2.0", "infergate/runtime-cuda:0.2.0"};
  reconciler_ = std::make_unique<InferenceModelReconciler>(store_, platform_, events_, capacity_, clock_, o);
  step();
  // Stable is untouched: the same template, the old agent; the new images run in a canary.
  EXPECT_EQ(platform_.workload("glm")->template_hash(), before->template_hash());
  EXPECT_EQ(stage_name(), "artifact");
  auto canary = platform_.workload("glm-canary");
  ASSERT_TRUE(canary.has_value());
  EXPECT_EQ(canary->verify.image, "infergate/agent:0.2.0");
  EXPECT_EQ(canary->engine.container.image, "infergate/runtime:0.2.0");
  EXPECT_NE(
      events_.message("StageStarted").find("agent image infergate/agent:0.1.0 -> infergate/agent:0.2.0"),
      std::string::npos)
      << events_.message("StageStarted");
  // Gated like any stage; once promoted, stable runs the new images and records them.
  steps(2);
  clock_.advance(61s);
  steps(4);
  EXPECT_FALSE(status().contains("stage")) << status().dump(2);
  EXPECT_EQ(platform_.workload("glm")->verify.image, "infergate/agent:0.2.0");
  EXPECT_EQ(status()["stable"]["podConfig"]["images"]["agent"], "infergate/agent:0.2.0");
  EXPECT_EQ(status()["history"].back()["stage"], "artifact");
  EXPECT_EQ(status()["history"].back()["outcome"], "Promoted");
}

TEST_F(Rollout, AStatusFromBeforeImagesWereRecordedAdoptsTheOperatorsImagesWithoutAStage) {
  deploy();
  Json m = store_.object();
  m["status"]["stable"]["podConfig"].erase("images");
  auto pc = api::pod_config_from_json(m["status"]["stable"]["podConfig"]);
  ASSERT_TRUE(pc.ok());
  m["status"]["stable"]["revision"] = api::revision(*pc);
  store_.put(m);
  step();
  EXPECT_FALSE(status().contains("stage"));
  EXPECT_EQ(status()["stable"]["podConfig"]["images"]["agent"], "infergate/agent:0.1.0");
}

TEST_F(Rollout, EachModelGetsADisruptionBudgetOfAQuarterOfItsReplicasAtLeastOne) {
  deploy();
  auto b = platform_.budget("glm");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->max_unavailable, 1);
  EXPECT_EQ(b->selector, (std::map<std::string, std::string>{{"serving.infergate.dev/model", "glm"},
                                                             {"serving.infergate.dev/track", "stable"}}));
  change([](Json& s) { s["replicas"] = 12; });
  step();
  EXPECT_EQ(platform_.budget("glm")->max_unavailable, 3);
  EXPECT_EQ(status()["selector"], "serving.infergate.dev/model=glm,serving.infergate.dev/track=stable");
  for (auto [replicas, unavailable] : {std::pair{0, 1}, {1, 1}, {7, 1}, {8, 2}, {100, 25}}) {
    EXPECT_EQ(render_disruption_budget("glm", replicas).max_unavailable, unavailable) << replicas;
  }
}

TEST_F(Rollout, VersionDriftCountsStablePodsServingAnotherRelease) {
  deploy();
  EXPECT_EQ(metrics_.drift, 0);
  platform_.pods = [](const platform::WorkloadSpec&, int i) {
    return FakePod{0, op::testing::verified_verdict("sha256:" + std::string(64, i == 0 ? 'a' : 'b')), true,
                   "", 0};
  };
  step();
  EXPECT_EQ(metrics_.drift, 1);
}

}  // namespace
}  // namespace infergate::op::controllers
