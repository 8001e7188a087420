// LocalPlatform with stand-in agent and runtime binaries (tests/local/fake): pods started through
// `agent exec`, readiness, verification refusals, crash loops, rolling updates, endpoints, jobs and
// restarts on the same state directory. The e2e tests run the real binaries.
#include "infergate/operator/local/local_platform.h"
#include "common/eventually.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "infergate/common/fs.h"
#include "infergate/http/client.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"
#include "infergate/operator/api/yaml.h"
#include "infergate/operator/controllers/steady_state.h"

namespace infergate::op::local {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using platform::PodState;
using platform::VerifyState;

using infergate::testing::eventually;
// Pods here are real processes (the agent, then a runtime on a generated model): they start in seconds.
constexpr auto kStart = 20s;

api::InferenceModelSpec spec(const std::string& kv = "fp16", int replicas = 1,
                             const std::string& volume = "") {
  std::string y =
      "apiVersion: serving.infergate.dev/v1alpha1\nkind: InferenceModel\nmetadata: {name: m, namespace: "
      "default}\n"
      "spec:\n  replicas: " +
      std::to_string(replicas) + "\n  artifact:\n" +
      (volume.empty() ? "    volume: {persistentVolumeClaim: {claimName: models}}\n" : volume) +
      "    path: tiny/fp16\n    trust: {publicKeySecretRef: {name: signing-key}, expectName: tiny}\n"
      "  serving: {weightFormat: fp16, kvCacheDtype: " +
      kv + ", maxContextLength: 256, maxConcurrency: 4}\n";
  auto j = api::parse_yaml(y, "test");
  auto m = api::parse_inference_model(*j);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m->spec;
}

class LocalPlatformTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_.path() / "volumes" / "models" / "tiny" / "fp16");
    fs::create_directories(root_.path() / "keys" / "signing-key");
    ASSERT_TRUE(write_file_atomic(root_.path() / "keys" / "signing-key" / "release.pub.pem", "key").ok());
  }
  LocalOptions options(std::map<std::string, std::string> env = {}) {
    LocalOptions o;
    o.state_dir = root_.path() / "state";
    o.volumes_dir = root_.path() / "volumes";
    o.keys_dir = root_.path() / "keys";
    o.bin_dir = INFERGATE_LOCAL_FAKE_BIN;
    o.backoff = BackoffPolicy{200ms, 400ms, 60000ms};
    o.grace = 2s;
    o.probe_period = 50ms;
    o.env = std::move(env);
    return o;
  }
  std::unique_ptr<LocalPlatform> make(std::map<std::string, std::string> env = {}) {
    auto p = LocalPlatform::create(options(std::move(env)));
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    return std::move(*p);
  }
  platform::WorkloadSpec workload(LocalPlatform& p, const api::InferenceModelSpec& s,
                                  api::Track track = api::Track::kStable) {
    controllers::PlanContext ctx;
    ctx.layout = p.layout();
    auto w = controllers::render_workload("m", api::pod_config(s), track, s.replicas, ctx);
    EXPECT_TRUE(w.ok()) << w.error().to_string();
    return *w;
  }
  platform::WorkloadState observe(LocalPlatform& p, const std::string& name = "m") {
    auto s = p.observe_workload(model_, name);
    EXPECT_TRUE(s.ok());
    return *s;
  }
  TempDir root_ = std::move(*TempDir::create("localplat"));
  platform::ModelRef model_{"default", "m", "uid-1"};
};

TEST_F(LocalPlatformTest, APodRunsTheAgentWhichExecsTheRuntimeOnAPortOfItsOwn) {
  auto p = make();
  auto w = workload(*p, spec());
  auto argv = p->pod_command(w, "/state/pods/x");
  ASSERT_TRUE(argv.ok()) << argv.error().to_string();
  const std::string model_dir = (root_.path() / "volumes" / "models" / "tiny" / "fp16").string();
  EXPECT_EQ((*argv)[0], std::string(INFERGATE_LOCAL_FAKE_BIN) + "/infergate-agent");
  EXPECT_EQ((*argv)[1], "exec");
  EXPECT_EQ((*argv)[2], model_dir);
  auto dashdash = std::find(argv->begin(), argv->end(), "--");
  ASSERT_NE(dashdash, argv->end());
  EXPECT_EQ(*(dashdash + 1), std::string(INFERGATE_LOCAL_FAKE_BIN) + "/infergate-runtime");
  auto after = [&](const std::string& flag) {
    auto it = std::find(argv->begin(), argv->end(), flag);
    return it != argv->end() && it + 1 != argv->end() ? *(it + 1) : std::string("<none>");
  };
  EXPECT_EQ(after("--public-key"), (root_.path() / "keys" / "signing-key").string() + "/");
  EXPECT_EQ(after("--termination-log"), "/state/pods/x/termination-log");
  // exec reports a verified release to --report only (the runtime owns the termination log then).
  EXPECT_EQ(after("--report"), "/state/pods/x/verdict.json");
  EXPECT_LT(std::find(argv->begin(), argv->end(), "--report"), dashdash)
      << "an agent flag, not the runtime's";
  EXPECT_EQ(after("--model"), model_dir);
  EXPECT_EQ(after("--port"), "0");
  EXPECT_EQ(after("--host"), "127.0.0.1");
  EXPECT_EQ(after("--served-model-name"), "m");
}

TEST_F(LocalPlatformTest, AppliedWorkloadBecomesReadyWithVerifiedPods) {
  auto p = make();
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec("fp16", 2))).ok());
  ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 2; }, kStart));
  auto s = observe(*p);
  EXPECT_TRUE(s.exists);
  EXPECT_EQ(s.updated_replicas, 2);
  ASSERT_EQ(s.pods.size(), 2u);
  for (const auto& pod : s.pods) {
    EXPECT_EQ(pod.verify.phase, VerifyState::Phase::kSucceeded);
    EXPECT_NE(pod.verify.termination_message.find("\"Verified\""), std::string::npos);
    EXPECT_EQ(pod.phase, PodState::Phase::kRunning);
    EXPECT_FALSE(pod.address.empty());
    EXPECT_EQ(p->pod_url(model_, pod), "http://" + pod.address);
  }
  EXPECT_NE(s.pods[0].address, s.pods[1].address);
  // Applying the same spec again changes nothing.
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec("fp16", 2))).ok());
  auto again = observe(*p);
  EXPECT_EQ(again.pods[0].name, s.pods[0].name);
  EXPECT_EQ(again.pods[0].restarts, 0);
}

TEST_F(LocalPlatformTest, AnEndpointRoutesToTheReadyPods) {
  auto p = make();
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec())).ok());
  ASSERT_TRUE(p->apply_endpoint(model_, controllers::render_endpoint("m")).ok());
  auto ep = p->observe_endpoint(model_, "m");
  ASSERT_TRUE(ep.ok());
  EXPECT_TRUE(ep->exists);
  ASSERT_FALSE(ep->url.empty());
  ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 1; }, kStart));
  http::ClientRequest request;
  request.timeout = 5s;
  auto r = http::fetch(ep->url + "/readyz", request);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(p->resolve("m")->size(), 1u);
  EXPECT_EQ(p->model_endpoints(), std::vector<std::string>{"m"});
  EXPECT_FALSE(p->resolve("other").has_value());
}

TEST_F(LocalPlatformTest, ARefusedVerificationShowsTheAgentsVerdictAndRetriesWithBackoff) {
  auto p = make({{"FAKE_AGENT_REFUSE", "1"}});
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec())).ok());
  ASSERT_TRUE(eventually(
      [&] {
        auto s = observe(*p);
        return !s.pods.empty() && s.pods[0].verify.phase == VerifyState::Phase::kFailed &&
               s.pods[0].restarts >= 1;
      },
      kStart));
  auto pod = observe(*p).pods[0];
  EXPECT_EQ(pod.phase, PodState::Phase::kPending);
  EXPECT_FALSE(pod.ready);
  EXPECT_NE(pod.verify.termination_message.find("DigestMismatch"), std::string::npos)
      << pod.verify.termination_message;
  EXPECT_EQ(pod.verify.exit_code, 40);
  auto verdicts = controllers::verification_from_pods(observe(*p), workload(*p, spec()).revision);
  ASSERT_EQ(verdicts.refused.size(), 1u);
  EXPECT_EQ(verdicts.refused[0].second.reason, "DigestMismatch");
  EXPECT_EQ(verdicts.refused[0].second.file, "model.safetensors");
}

TEST_F(LocalPlatformTest, ACrashingRuntimeIsRestartedAndShownAsCrashLoopBackOff) {
  auto p = make({{"FAKE_RUNTIME_CRASH_AFTER", "0.3"}});
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec())).ok());
  ASSERT_TRUE(eventually(
      [&] {
        auto s = observe(*p);
        return !s.pods.empty() && s.pods[0].waiting_reason == "CrashLoopBackOff";
      },
      kStart));
  auto pod = observe(*p).pods[0];
  EXPECT_EQ(pod.verify.phase, VerifyState::Phase::kSucceeded);
  EXPECT_FALSE(pod.ready);
  EXPECT_NE(pod.message.find("exit 3"), std::string::npos) << pod.message;
  ASSERT_TRUE(eventually([&] { return observe(*p).pods[0].restarts >= 2; }, kStart));
}

TEST_F(LocalPlatformTest, AnUpdatedWorkloadRollsWithoutLosingItsReadyPod) {
  auto p = make();
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec("fp16"))).ok());
  ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 1; }, kStart));
  const auto next = workload(*p, spec("int8"));
  ASSERT_NE(next.template_hash(), workload(*p, spec("fp16")).template_hash());
  ASSERT_TRUE(p->apply_workload(model_, next).ok());
  bool never_empty = true;
  ASSERT_TRUE(eventually(
      [&] {
        auto s = observe(*p);
        if (s.ready_replicas < 1) never_empty = false;
        return s.pods.size() == 1 && s.pods[0].revision == next.revision && s.ready_replicas == 1;
      },
      kStart));
  EXPECT_TRUE(never_empty) << "the rolling update went through a moment without a ready pod";
}

TEST_F(LocalPlatformTest, ScalingAndDeletingStopThePods) {
  auto p = make();
  ASSERT_TRUE(p->apply_workload(model_, workload(*p, spec("fp16", 2))).ok());
  ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 2; }, kStart));
  ASSERT_TRUE(p->scale_workload(model_, "m", 1).ok());
  ASSERT_TRUE(eventually([&] { return observe(*p).pods.size() == 1; }, kStart));
  EXPECT_EQ(*p->list_workloads(model_), std::vector<std::string>{"m"});
  ASSERT_TRUE(p->delete_workload(model_, "m").ok());
  EXPECT_FALSE(observe(*p).exists);
  EXPECT_TRUE(eventually([&] { return p->pods().empty(); }, kStart));
  EXPECT_TRUE(p->delete_workload(model_, "m").ok());  // deleting what is gone succeeds
}

TEST_F(LocalPlatformTest, ARestartedPlatformFindsItsWorkloadsAndStartsTheirPodsAgain) {
  std::string hash;
  {
    auto p = make();
    auto w = workload(*p, spec());
    hash = w.template_hash();
    ASSERT_TRUE(p->apply_workload(model_, w).ok());
    ASSERT_TRUE(p->apply_endpoint(model_, controllers::render_endpoint("m")).ok());
    ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 1; }, kStart));
  }
  auto p = make();
  auto s = observe(*p);
  EXPECT_TRUE(s.exists);
  EXPECT_EQ(s.template_hash, hash);
  EXPECT_TRUE(p->observe_endpoint(model_, "m")->exists);
  ASSERT_TRUE(eventually([&] { return observe(*p).ready_replicas == 1; }, kStart));
  EXPECT_EQ(p->model_keys(), std::vector<std::string>{"default/m"});
  ASSERT_TRUE(p->cleanup(model_).ok());
  EXPECT_FALSE(observe(*p).exists);
  EXPECT_FALSE(p->observe_endpoint(model_, "m")->exists);
}

TEST_F(LocalPlatformTest, AJobRunsOnceAndReportsItsTerminationMessage) {
  auto p = make();
  platform::JobSpec job;
  job.name = "m-q-abc";
  job.container.command = {"/bin/sh"};
  job.container.args = {"-c", "echo '{\"suite\":\"default\",\"passed\":false}' > @termination-log@; exit 1"};
  job.deadline_seconds = 60;
  ASSERT_TRUE(p->apply_job(model_, job).ok());
  ASSERT_TRUE(eventually(
      [&] { return p->observe_job(model_, job.name)->phase == platform::JobState::Phase::kFailed; }, kStart));
  auto s = *p->observe_job(model_, job.name);
  EXPECT_TRUE(s.exists);
  EXPECT_TRUE(s.terminated);
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_EQ(s.reason, "Error");
  EXPECT_EQ(s.termination_message, "{\"suite\":\"default\",\"passed\":false}");
  EXPECT_EQ(s.hash, job.hash());
  // The result is kept on disk: a restarted platform reports the same.
  p.reset();
  p = make();
  auto again = *p->observe_job(model_, job.name);
  EXPECT_EQ(again.phase, platform::JobState::Phase::kFailed);
  EXPECT_EQ(again.termination_message, s.termination_message);
  ASSERT_TRUE(p->delete_job(model_, job.name).ok());
  EXPECT_FALSE(p->observe_job(model_, job.name)->exists);
}

TEST_F(LocalPlatformTest, AJobPastItsDeadlineFailsWithoutAResult) {
  auto p = make();
  platform::JobSpec job;
  job.name = "slow";
  job.container.command = {"/bin/sh"};
  job.container.args = {"-c", "exec sleep 1000"};
  job.deadline_seconds = 1;
  ASSERT_TRUE(p->apply_job(model_, job).ok());
  EXPECT_EQ(p->observe_job(model_, job.name)->exists, true);
  ASSERT_TRUE(eventually(
      [&] { return p->observe_job(model_, job.name)->phase == platform::JobState::Phase::kFailed; }, kStart));
  auto s = *p->observe_job(model_, job.name);
  EXPECT_EQ(s.reason, "DeadlineExceeded");
  EXPECT_FALSE(s.terminated);
}

TEST_F(LocalPlatformTest, TrustIsADirectoryOfPemKeysPerSecret) {
  auto p = make();
  api::TrustSpec t;
  t.public_key_secret = "signing-key";
  EXPECT_EQ(*p->check_trust(model_, t), platform::TrustState::kPresent);
  t.public_key_secret = "absent";
  EXPECT_EQ(*p->check_trust(model_, t), platform::TrustState::kMissing);
}

TEST_F(LocalPlatformTest, RefusesAnNfsVolumeWithAReason) {
  auto p = make();
  auto s = spec("fp16", 1, "    volume: {nfs: {server: nas, path: /export}}\n");
  auto st = p->apply_workload(model_, workload(*p, s));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "UnsupportedVolume");
  EXPECT_FALSE(observe(*p).exists);
}

}  // namespace
}  // namespace infergate::op::local
