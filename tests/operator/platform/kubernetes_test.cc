// Rendering Deployments and Services, and reading pods back, for the Kubernetes platform.
#include "infergate/operator/platform/kubernetes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "api/testdata.h"
#include "infergate/operator/controllers/steady_state.h"

namespace infergate::op::platform {
namespace {

WorkloadSpec workload(std::function<void(Json&)> edit = {}) {
  Json j = api::testing::valid_model();
  if (edit) edit(j);
  auto m = api::parse_inference_model(j);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  controllers::PlanContext ctx{WallTime{}, api::Images{}, kubernetes_layout()};
  auto w = controllers::render_workload("glm-4-9b", api::pod_config(m->spec), api::Track::kStable, 2, ctx);
  EXPECT_TRUE(w.ok()) << w.error().to_string();
  return *w;
}

const ModelRef kModel{"models", "glm-4-9b", "uid-1"};

const Json& named(const Json& list, const std::string& name) {
  for (const auto& item : list) {
    if (item.value("name", "") == name) return item;
  }
  static const Json none;
  ADD_FAILURE() << "no item named " << name;
  return none;
}

TEST(RenderDeployment, FitsTheRestrictedPodSecurityStandard) {
  Json d = render_deployment(kModel, workload());
  const Json& pod = d["spec"]["template"]["spec"];
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(pod["automountServiceAccountToken"], false);
  for (const char* list : {"initContainers", "containers"}) {
    for (const auto& c : pod[list]) {
      const Json& sc = c["securityContext"];
      EXPECT_EQ(sc["allowPrivilegeEscalation"], false) << c["name"];
      EXPECT_EQ(sc["capabilities"]["drop"], Json::array({"ALL"})) << c["name"];
      EXPECT_EQ(sc["readOnlyRootFilesystem"], true) << c["name"];
      EXPECT_EQ(sc["runAsNonRoot"], true) << c["name"];
      EXPECT_EQ(sc["seccompProfile"]["type"], "RuntimeDefault") << c["name"];
      EXPECT_FALSE(sc.contains("runAsUser") && sc["runAsUser"] == 0) << c["name"];
    }
  }
  for (const auto& v : pod["volumes"]) {
    EXPECT_FALSE(v.contains("hostPath")) << v.dump();
  }
}

TEST(RenderDeployment, MountsTheArtifactReadOnlyEverywhere) {
  Json d = render_deployment(kModel, workload());
  const Json& pod = d["spec"]["template"]["spec"];
  const Json& vol = named(pod["volumes"], "model-artifacts");
  EXPECT_EQ(vol["persistentVolumeClaim"]["claimName"], "verified-model-artifacts");
  EXPECT_EQ(vol["persistentVolumeClaim"]["readOnly"], true);
  int mounts = 0;
  for (const char* list : {"initContainers", "containers"}) {
    for (const auto& c : pod[list]) {
      for (const auto& m : c["volumeMounts"]) {
        if (m["name"] == "model-artifacts" || m["name"] == "trust-keys") {
          EXPECT_EQ(m["readOnly"], true) << c["name"] << " " << m["name"];
          ++mounts;
        }
      }
    }
  }
  EXPECT_EQ(mounts, 4);  // verify and runtime (whose agent wrapper verifies again): artifact + keys
  Json nfs = render_deployment(
      kModel, workload([](Json& j) {
        j["spec"]["artifact"]["volume"] = {{"nfs", {{"server", "nfs.local"}, {"path", "/exports/models"}}}};
      }));
  EXPECT_EQ(named(nfs["spec"]["template"]["spec"]["volumes"], "model-artifacts")["nfs"]["readOnly"], true);
}

TEST(RenderDeployment, RunsTheAgentFirstWithTheTrustSecretAndTerminationLog) {
  Json d = render_deployment(kModel, workload());
  const Json& pod = d["spec"]["template"]["spec"];
  const Json& verify = named(pod["initContainers"], "verify");
  EXPECT_EQ(verify["image"], "infergate/agent:0.1.0");
  EXPECT_EQ(verify["command"][0], "infergate-agent");
  EXPECT_EQ(verify["args"][0], "verify");
  EXPECT_EQ(verify["terminationMessagePath"], "/dev/termination-log");
  EXPECT_EQ(verify["terminationMessagePolicy"], "File");
  EXPECT_EQ(named(pod["volumes"], "trust-keys")["secret"]["secretName"], "model-signing-key");
  const Json& runtime = named(pod["containers"], "runtime");
  EXPECT_EQ(runtime["image"], "infergate/runtime-cuda:0.1.0");
  EXPECT_EQ(runtime["readinessProbe"]["httpGet"]["path"], "/readyz");
  EXPECT_EQ(runtime["livenessProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(runtime["resources"]["limits"]["nvidia.com/gpu"], "1");
}

// Verification on every start: the init container installs the agent into an emptyDir, and every
// engine's container (a third-party image without our agent included) starts through it.
TEST(RenderDeployment, EveryEngineStartsThroughTheAgentTheInitContainerInstalled) {
  for (std::string kind : {"bundled", "vllm"}) {
    SCOPED_TRACE(kind);
    Json d = render_deployment(kModel, workload([&](Json& j) {
                                 if (kind == "bundled") return;
                                 j["spec"]["engine"] = {{"kind", "vllm"},
                                                        {"image", "vllm/vllm-openai:v0.11.0"},
                                                        {"args", {"--enable-prefix-caching"}}};
                                 j["spec"]["serving"]["weightFormat"] = "bf16";
                                 j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                               }));
    const Json& pod = d["spec"]["template"]["spec"];
    const Json& verify = named(pod["initContainers"], "verify");
    const Json& va = verify["args"];
    ASSERT_GE(va.size(), 2u);
    EXPECT_EQ(va[va.size() - 2], "--install-agent");
    EXPECT_EQ(va[va.size() - 1], "/infergate");
    EXPECT_FALSE(named(verify["volumeMounts"], "infergate-agent").value("readOnly", false));
    EXPECT_EQ(named(pod["volumes"], "infergate-agent")["emptyDir"]["sizeLimit"], "256Mi");
    const Json& runtime = named(pod["containers"], "runtime");
    EXPECT_EQ(named(runtime["volumeMounts"], "infergate-agent")["readOnly"], true);
    EXPECT_EQ(named(runtime["volumeMounts"], "trust-keys")["readOnly"], true);
    std::vector<std::string> cmd = runtime["command"].get<std::vector<std::string>>();
    ASSERT_GE(cmd.size(), 8u);
    EXPECT_EQ(std::vector<std::string>(cmd.begin(), cmd.begin() + 6),
              (std::vector<std::string>{"/infergate/lib/ld.so", "--library-path", "/infergate/lib",
                                        "/infergate/bin/infergate-agent", "exec", "/models/glm-4-9b/r3"}));
    auto dashes = std::find(cmd.begin(), cmd.end(), "--");
    ASSERT_NE(dashes, cmd.end());
    // exec takes the init step's verify flags, without the install.
    std::vector<std::string> flags(cmd.begin() + 6, dashes);
    std::vector<std::string> verify_flags(va.begin() + 2, va.end() - 2);
    EXPECT_EQ(flags, verify_flags);
    std::vector<std::string> engine(dashes + 1, cmd.end());
    if (kind == "bundled") {
      EXPECT_EQ(engine, std::vector<std::string>{"infergate-runtime"});
      EXPECT_EQ(runtime["args"][0], "serve");
    } else {
      EXPECT_EQ(engine, (std::vector<std::string>{"python3", "-m", "vllm.entrypoints.openai.api_server"}));
      EXPECT_EQ(runtime["args"][0], "--model");
      EXPECT_EQ(runtime["args"].back(), "--enable-prefix-caching");
      EXPECT_EQ(runtime["image"], "vllm/vllm-openai:v0.11.0");
    }
  }
}

// llama.cpp reads every option from LLAMA_ARG_* too: podTemplate.env must not get past engine.args.
TEST(RenderWorkload, RefusesEnvThatLlamacppReadsAsOptions) {
  Json j = api::testing::valid_model();
  j["spec"]["engine"] = {
      {"kind", "llamacpp"}, {"image", "ghcr.io/ggml-org/llama.cpp:server-b6500"}, {"modelFile", "m.gguf"}};
  j["spec"]["podTemplate"] = {{"env", {{{"name", "LLAMA_ARG_HF_REPO"}, {"value", "someone/model"}}}}};
  auto m = api::parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  controllers::PlanContext ctx{WallTime{}, api::Images{}, kubernetes_layout()};
  auto w = controllers::render_workload("glm-4-9b", api::pod_config(m->spec), api::Track::kStable, 1, ctx);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().reason(), "ConflictingEnv");
  EXPECT_NE(w.error().message().find("LLAMA_ARG_HF_REPO"), std::string::npos) << w.error().message();
}

TEST(RenderDeployment, IsOwnedByTheModelAndSelectsItsTrack) {
  WorkloadSpec w = workload();
  Json d = render_deployment(kModel, w);
  const Json& owner = d["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "InferenceModel");
  EXPECT_EQ(owner["apiVersion"], "serving.infergate.dev/v1alpha1");
  EXPECT_EQ(owner["uid"], "uid-1");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
  EXPECT_EQ(d["metadata"]["namespace"], "models");
  EXPECT_EQ(d["spec"]["replicas"], 2);
  EXPECT_EQ(d["spec"]["selector"]["matchLabels"]["serving.infergate.dev/track"], "stable");
  EXPECT_EQ(d["spec"]["template"]["metadata"]["labels"]["serving.infergate.dev/revision"], w.revision);
  EXPECT_EQ(d["metadata"]["annotations"]["serving.infergate.dev/template-hash"], w.template_hash());
  EXPECT_EQ(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
}

TEST(RenderService, RoutesToEveryReadyPodOfTheModel) {
  Json s = render_service(kModel, controllers::render_endpoint("glm-4-9b"));
  EXPECT_EQ(s["spec"]["selector"], Json({{"serving.infergate.dev/model", "glm-4-9b"}}));
  EXPECT_EQ(s["spec"]["ports"][0]["targetPort"], "http");
  EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], "uid-1");
}

TEST(TemplateHash, ChangesWithTheTemplateNotTheReplicas) {
  WorkloadSpec a = workload();
  WorkloadSpec b = a;
  b.replicas = 7;
  EXPECT_EQ(a.template_hash(), b.template_hash());
  b.engine.container.image = "other:1";
  EXPECT_NE(a.template_hash(), b.template_hash());
}

TEST(PodState, ReadsTheAgentVerdictAndTheRuntimeState) {
  Json pod = Json::parse(R"({
    "metadata": {"name": "glm-1", "labels": {"serving.infergate.dev/revision": "r1"}},
    "spec": {"containers": [{"name": "runtime", "ports": [{"name": "http", "containerPort": 8000}]}]},
    "status": {"phase": "Running", "podIP": "10.0.0.5",
      "conditions": [{"type": "Ready", "status": "True"}],
      "initContainerStatuses": [{"name": "verify", "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "message": "{\"reason\":\"Verified\"}"}}}],
      "containerStatuses": [{"name": "runtime", "restartCount": 2, "state": {"running": {}}}]}})");
  PodState p = pod_state(pod);
  EXPECT_EQ(p.name, "glm-1");
  EXPECT_EQ(p.revision, "r1");
  EXPECT_TRUE(p.ready);
  EXPECT_EQ(p.phase, PodState::Phase::kRunning);
  EXPECT_EQ(p.verify.phase, VerifyState::Phase::kSucceeded);
  EXPECT_EQ(p.verify.termination_message, "{\"reason\":\"Verified\"}");
  EXPECT_EQ(p.restarts, 2);
  EXPECT_EQ(p.address, "10.0.0.5:8000");
}

TEST(PodState, KeepsAFailedVerdictWhileTheAgentRestarts) {
  Json pod = Json::parse(R"({
    "metadata": {"name": "glm-1"},
    "status": {"phase": "Pending",
      "initContainerStatuses": [{"name": "verify", "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 5, "message": "{\"reason\":\"DigestMismatch\"}"}}}]}})");
  PodState p = pod_state(pod);
  EXPECT_EQ(p.verify.phase, VerifyState::Phase::kFailed);
  EXPECT_EQ(p.verify.exit_code, 5);
  EXPECT_EQ(p.verify.waiting_reason, "CrashLoopBackOff");
  EXPECT_EQ(p.verify.restarts, 3);
}

TEST(PodState, ReportsWhyTheRuntimeIsNotRunning) {
  Json pod = Json::parse(R"({"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "runtime",
      "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m"}},
      "lastState": {"terminated": {"exitCode": 3, "message": "int4 KV is not supported on this device"}}}]}})");
  PodState p = pod_state(pod);
  EXPECT_EQ(p.waiting_reason, "CrashLoopBackOff");
  EXPECT_EQ(p.message, "int4 KV is not supported on this device");
  EXPECT_FALSE(p.ready);
}

TEST(PodState, ReadsAnUnschedulablePodAndHowTheRuntimeLastEnded) {
  Json pod = Json::parse(R"({"metadata": {"name": "p"}, "status": {"phase": "Pending",
      "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}})");
  PodState p = pod_state(pod);
  EXPECT_TRUE(p.unschedulable);
  EXPECT_EQ(p.schedule_message, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
  pod = Json::parse(R"({"metadata": {"name": "p"}, "status": {"startTime": "2026-01-01T00:00:00Z",
      "containerStatuses": [{"name": "runtime",
      "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
      "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:05:00Z"}}}]}})");
  p = pod_state(pod);
  EXPECT_FALSE(p.unschedulable);
  EXPECT_EQ(p.last_termination_reason, "OOMKilled");
  EXPECT_EQ(p.last_exit_code, 137);
  // When, for judging a crash loop on restarts within a window.
  ASSERT_TRUE(p.started_at && p.last_terminated_at);
  EXPECT_EQ(format_rfc3339(*p.started_at), "2026-01-01T00:00:00Z");
  EXPECT_EQ(*p.last_terminated_at - *p.started_at, std::chrono::minutes(5));
}

TEST(WorkloadState, ReadsFailedCreateAndTheUpdateStrategy) {
  Json d = Json::parse(R"({"metadata": {"generation": 1},
      "spec": {"replicas": 1, "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
      "status": {"observedGeneration": 1, "conditions": [{"type": "ReplicaFailure", "status": "True",
        "reason": "FailedCreate", "message": "pods \"x\" is forbidden: violates PodSecurity"}]}})");
  WorkloadState w = workload_state(d, {});
  EXPECT_EQ(w.failure_reason, "FailedCreate");
  EXPECT_EQ(w.failure_message, "pods \"x\" is forbidden: violates PodSecurity");
  EXPECT_EQ(w.surge, false);
  d["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = "25%";
  d["status"].erase("conditions");
  w = workload_state(d, {});
  EXPECT_EQ(w.surge, true);
  EXPECT_TRUE(w.failure_reason.empty());
}

TEST(RenderDeployment, AppliesThePodTemplateButNeverToTheAgentOrTheSecurityContext) {
  WorkloadSpec w = workload([](Json& j) {
    j["spec"]["podTemplate"] = Json::parse(R"({
      "imagePullSecrets": [{"name": "regcred"}], "priorityClassName": "inference-high",
      "serviceAccountName": "serving", "nodeSelector": {"pool": "h200"},
      "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                     "whenUnsatisfiable": "DoNotSchedule"}],
      "env": [{"name": "HF_HOME", "value": "/cache"}],
      "volumes": [{"name": "cache", "emptyDir": {}}],
      "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]})");
  });
  Json pod = render_deployment(kModel, w)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["imagePullSecrets"], Json::parse(R"([{"name": "regcred"}])"));
  EXPECT_EQ(pod["priorityClassName"], "inference-high");
  EXPECT_EQ(pod["serviceAccountName"], "serving");
  EXPECT_EQ(pod["automountServiceAccountToken"], false) << "a service account, never its token";
  EXPECT_EQ(pod["nodeSelector"]["pool"], "h200");
  EXPECT_EQ(pod["topologySpreadConstraints"][0]["maxSkew"], 1);
  const Json& runtime = named(pod["containers"], "runtime");
  EXPECT_EQ(named(runtime["env"], "HF_HOME")["value"], "/cache");
  EXPECT_EQ(named(runtime["volumeMounts"], "cache")["mountPath"], "/cache");
  EXPECT_EQ(named(runtime["volumeMounts"], "model-artifacts")["readOnly"], true);
  EXPECT_EQ(named(pod["volumes"], "cache")["emptyDir"], Json::object());
  const Json& verify = named(pod["initContainers"], "verify");
  EXPECT_FALSE(verify.contains("env"));
  // The agent sees the artifact, the keys and the emptyDir it installs itself into, nothing else.
  EXPECT_EQ(verify["volumeMounts"].size(), 3u);
  EXPECT_EQ(named(verify["volumeMounts"], "infergate-agent")["mountPath"], "/infergate");
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
}

TEST(RenderDeployment, GivesTheBundledRuntimeSharedMemoryForTensorParallelism) {
  auto mounts = [](const WorkloadSpec& w) {
    const Json d = render_deployment(kModel, w);
    std::set<std::string> out;
    for (const auto& m : named(d["spec"]["template"]["spec"]["containers"], "runtime")["volumeMounts"])
      out.insert(m["mountPath"].get<std::string>());
    return out;
  };
  EXPECT_FALSE(mounts(workload()).count("/dev/shm")) << "one GPU: no NCCL, no /dev/shm";
  WorkloadSpec tp = workload([](Json& j) { j["spec"]["resources"]["limits"]["nvidia.com/gpu"] = "4"; });
  EXPECT_TRUE(mounts(tp).count("/dev/shm"));
  WorkloadSpec mig = workload([](Json& j) {
    j["spec"]["resources"]["limits"].erase("nvidia.com/gpu");
    j["spec"]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] = "1";
  });
  EXPECT_EQ(mig.engine.container.image, api::Images{}.runtime_cuda) << "a MIG slice is a GPU: the CUDA image";
}

TEST(RenderDeployment, RollsWithoutSurgeWhenTheWorkloadMayNotAddAPod) {
  WorkloadSpec w = workload();
  Json d = render_deployment(kModel, w);
  EXPECT_EQ(d["spec"]["strategy"]["rollingUpdate"], Json({{"maxSurge", 1}, {"maxUnavailable", 0}}));
  w.surge = false;
  d = render_deployment(kModel, w);
  EXPECT_EQ(d["spec"]["strategy"]["rollingUpdate"], Json({{"maxSurge", 0}, {"maxUnavailable", 1}}));
  EXPECT_EQ(workload_state(d, {}).surge, false);
}

TEST(WorkloadState, KnowsWhetherTheControllerCaughtUp) {
  Json d = {
      {"metadata", {{"generation", 3}, {"annotations", {{"serving.infergate.dev/template-hash", "h"}}}}},
      {"spec", {{"replicas", 2}}},
      {"status", {{"observedGeneration", 2}, {"readyReplicas", 2}, {"updatedReplicas", 2}}}};
  WorkloadState w = workload_state(d, {});
  EXPECT_TRUE(w.exists);
  EXPECT_EQ(w.template_hash, "h");
  EXPECT_FALSE(w.observed_current);
  d["status"]["observedGeneration"] = 3;
  EXPECT_TRUE(workload_state(d, {}).observed_current);
}

}  // namespace
}  // namespace infergate::op::platform

namespace infergate::op::platform {
namespace {

TEST(CacheTrimming, KeepsWhatThePlatformReadsAndDropsTheRest) {
  WorkloadSpec w = workload();
  Json d = render_deployment(kModel, w);
  d["metadata"]["generation"] = 2;
  d["metadata"]["managedFields"] = Json::array({{{"manager", "x"}}});
  d["status"] = {{"observedGeneration", 2}, {"readyReplicas", 2}, {"updatedReplicas", 2}};
  WorkloadState before = workload_state(d, {});
  size_t full = d.dump().size();
  trim_deployment(d);
  EXPECT_LT(d.dump().size(), full / 3);
  EXPECT_FALSE(d["spec"].contains("template"));
  EXPECT_FALSE(d["metadata"].contains("managedFields"));
  WorkloadState after = workload_state(d, {});
  EXPECT_EQ(after.template_hash, before.template_hash);
  EXPECT_EQ(after.replicas, before.replicas);
  EXPECT_EQ(after.ready_replicas, before.ready_replicas);
  EXPECT_EQ(after.observed_current, before.observed_current);

  Json pod = Json::parse(R"({"metadata": {"name": "p", "labels": {"serving.infergate.dev/revision": "r"}},
    "spec": {"volumes": [{"name": "v"}], "containers": [{"name": "runtime", "image": "i", "args": ["a"],
             "ports": [{"name": "http", "containerPort": 8000}]}]},
    "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}})");
  PodState p1 = pod_state(pod);
  trim_pod(pod);
  EXPECT_FALSE(pod["spec"].contains("volumes"));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("args"));
  PodState p2 = pod_state(pod);
  EXPECT_EQ(p2.address, p1.address);
  EXPECT_EQ(p2.ready, p1.ready);
  EXPECT_EQ(p2.revision, p1.revision);
}

}  // namespace
}  // namespace infergate::op::platform

namespace infergate::op::platform {
namespace {

JobSpec eval_job() {
  JobSpec j;
  j.name = "glm-q-abc";
  j.labels = {{"serving.infergate.dev/model", "glm"}, {"app.kubernetes.io/managed-by", "infergate-operator"}};
  j.container.image = "infergate/runtime:0.1.0";
  j.container.command = {"infergate-runtime"};
  j.container.args = {"eval", "--baseline", "http://glm-stable", "--candidate", "http://glm-canary"};
  j.deadline_seconds = 900;
  return j;
}

TEST(RenderJob, RunsOnceUnderTheDeadlineRestrictedAndReportsThroughTheTerminationMessage) {
  Json j = render_job(ModelRef{"models", "glm", "u-1"}, eval_job());
  EXPECT_EQ(j["kind"], "Job");
  EXPECT_EQ(j["spec"]["backoffLimit"], 0);
  EXPECT_EQ(j["spec"]["activeDeadlineSeconds"], 900);
  EXPECT_EQ(j["metadata"]["ownerReferences"][0]["uid"], "u-1");
  const Json& pod = j["spec"]["template"];
  EXPECT_EQ(pod["metadata"]["labels"]["serving.infergate.dev/job"], "glm-q-abc");
  EXPECT_EQ(pod["metadata"]["labels"]["serving.infergate.dev/model"], "glm");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsNonRoot"], true);
  const Json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["terminationMessagePolicy"], "File");
  EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(c["args"][0], "eval");
}

Json job_with(const Json& status) {
  Json j = render_job(ModelRef{"models", "glm", "u-1"}, eval_job());
  j["status"] = status;
  return j;
}

Json job_pod(const Json& state) {
  return {{"metadata", {{"name", "glm-q-abc-x"}}},
          {"status", {{"containerStatuses", Json::array({{{"name", "check"}, {"state", state}}})}}}};
}

TEST(JobState, ReadsTheResultFromTheTerminatedContainer) {
  Json pod =
      job_pod({{"terminated", {{"exitCode", 1}, {"reason", "Error"}, {"message", "{\"passed\":false}"}}}});
  JobState s =
      job_state(job_with({{"conditions", Json::array({{{"type", "Failed"},
                                                       {"status", "True"},
                                                       {"reason", "BackoffLimitExceeded"},
                                                       {"lastTransitionTime", "2026-01-01T00:00:05Z"}}})}}),
                {&pod});
  EXPECT_TRUE(s.exists);
  EXPECT_EQ(s.phase, JobState::Phase::kFailed);
  ASSERT_TRUE(s.failed_at.has_value());  // the gate waits a little from then for a pod not yet seen
  EXPECT_EQ(format_rfc3339(*s.failed_at), "2026-01-01T00:00:05Z");
  EXPECT_TRUE(s.terminated);
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_EQ(s.termination_message, "{\"passed\":false}");
  EXPECT_EQ(s.hash, eval_job().hash());
}

TEST(JobState, ReportsAnImageThatCannotBePulled) {
  Json pod = job_pod({{"waiting", {{"reason", "ImagePullBackOff"}, {"message", "Back-off pulling image"}}}});
  JobState s = job_state(job_with({{"active", 1}}), {&pod});
  EXPECT_EQ(s.phase, JobState::Phase::kRunning);
  EXPECT_FALSE(s.terminated);
  EXPECT_EQ(s.reason, "ImagePullBackOff");
}

TEST(JobState, ADeadlineWithoutAResultIsAFailureWithItsReason) {
  JobState s = job_state(
      job_with({{"conditions",
                 Json::array({{{"type", "Failed"}, {"status", "True"}, {"reason", "DeadlineExceeded"}}})}}),
      {});
  EXPECT_EQ(s.phase, JobState::Phase::kFailed);
  EXPECT_FALSE(s.terminated);
  EXPECT_EQ(s.reason, "DeadlineExceeded");
}

}  // namespace
}  // namespace infergate::op::platform
