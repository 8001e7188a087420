// Parsing, defaulting and validating InferenceModels; status JSON round trips.
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"

#include <gtest/gtest.h>

#include "api/testdata.h"

namespace infergate::op::api {
namespace {

using testing::valid_model;

TEST(InferenceModel, ParsesTheGlmExample) {
  auto m = parse_inference_model(valid_model());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->key(), "models/glm-4-9b");
  EXPECT_EQ(m->meta.generation, 3);
  EXPECT_EQ(m->spec.replicas, 2);
  EXPECT_EQ(m->spec.artifact.path, "glm-4-9b/r3");
  EXPECT_EQ(m->spec.artifact.volume.claim_name, "verified-model-artifacts");
  EXPECT_EQ(m->spec.artifact.trust.public_key_secret, "model-signing-key");
  EXPECT_EQ(*m->spec.artifact.trust.min_version, 3);
  EXPECT_EQ(m->spec.serving.weight_format, WeightFormat::kInt8);
  EXPECT_EQ(m->spec.serving.kv_cache_dtype, KvCacheDtype::kInt8);
  EXPECT_EQ(m->spec.serving.max_context_length, 32768);
  EXPECT_EQ(m->spec.resources.gpus(), 1);
  EXPECT_EQ(m->spec.resources.gpu_resource_name(), "nvidia.com/gpu");
}

TEST(InferenceModel, AppliesDefaultsLikeTheCrd) {
  Json j = valid_model();
  j["spec"].erase("replicas");
  j["spec"]["serving"].erase("kvCacheDtype");
  j["spec"]["serving"].erase("maxConcurrency");
  auto m = parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->spec.replicas, 1);
  EXPECT_EQ(m->spec.serving.kv_cache_dtype, KvCacheDtype::kFp16);
  EXPECT_EQ(m->spec.serving.max_concurrency, 8);
  EXPECT_EQ(m->spec.engine.kind, EngineKind::kBundled);
  ASSERT_EQ(m->spec.rollout.stage_order.size(), 3u);
  EXPECT_EQ(m->spec.rollout.stage_order[1], StageName::kKvCache);
  EXPECT_TRUE(m->spec.rollout.auto_rollback);
  EXPECT_EQ(m->spec.rollout.canary.replicas, 1);
}

TEST(InferenceModel, RefusesUnknownDtypeNamingTheField) {
  Json j = valid_model();
  j["spec"]["serving"]["kvCacheDtype"] = "fp9";
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().reason(), "InvalidSpec");
  EXPECT_NE(m.error().message().find("spec.serving.kvCacheDtype: unknown value \"fp9\""), std::string::npos)
      << m.error().message();
}

TEST(InferenceModel, ReportsEveryFieldErrorAtOnce) {
  Json j = valid_model();
  j["spec"]["serving"]["weightFormat"] = "int3";
  j["spec"]["serving"]["maxContextLength"] = 0;
  j["spec"]["artifact"]["path"] = "../etc";
  j["spec"]["replicas"] = -1;
  std::vector<FieldError> errors = validate_spec(j["spec"], nullptr);
  std::vector<std::string> paths;
  for (const auto& e : errors) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"spec.replicas", "spec.artifact.path",
                                             "spec.serving.weightFormat", "spec.serving.maxContextLength"}));
}

TEST(InferenceModel, RefusesNonCanonicalArtifactPaths) {
  for (const char* p : {"/abs", "a/../b", "a//b", "./a", "a/", "a/.", "sp ace", ""}) {
    Json j = valid_model();
    j["spec"]["artifact"]["path"] = p;
    auto m = parse_inference_model(j);
    EXPECT_FALSE(m.ok()) << p;
  }
}

TEST(InferenceModel, RequiresExactlyOneVolumeSource) {
  Json j = valid_model();
  j["spec"]["artifact"]["volume"]["nfs"] = {{"server", "nfs.local"}, {"path", "/exports"}};
  auto both = parse_inference_model(j);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message().find("exactly one of persistentVolumeClaim or nfs"), std::string::npos);
  j["spec"]["artifact"]["volume"].erase("persistentVolumeClaim");
  auto nfs = parse_inference_model(j);
  ASSERT_TRUE(nfs.ok()) << nfs.error().to_string();
  EXPECT_EQ(nfs->spec.artifact.volume.kind, VolumeSource::Kind::kNfs);
}

TEST(InferenceModel, RequiresTheTrustKeySecret) {
  Json j = valid_model();
  j["spec"]["artifact"]["trust"].erase("publicKeySecretRef");
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("spec.artifact.trust.publicKeySecretRef: required"), std::string::npos);
}

TEST(InferenceModel, ReadsTheTrustedReleaseFormatsAndKeylessIdentities) {
  Json j = valid_model();
  j["spec"]["artifact"]["trust"].erase("minVersion");
  j["spec"]["artifact"]["trust"]["formats"] = {"oms"};
  j["spec"]["artifact"]["trust"]["identities"] = Json::array(
      {{{"subject", "ci@example.com"}, {"issuer", "https://token.actions.githubusercontent.com"}}});
  auto m = parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->spec.artifact.trust.formats, std::vector<std::string>{"oms"});
  EXPECT_TRUE(m->spec.artifact.trust.allows("oms"));
  EXPECT_FALSE(m->spec.artifact.trust.allows("infergate"));
  ASSERT_EQ(m->spec.artifact.trust.identities.size(), 1u);
  EXPECT_EQ(m->spec.artifact.trust.identities[0].subject, "ci@example.com");
  EXPECT_TRUE(parse_inference_model(valid_model())->spec.artifact.trust.allows("infergate"));
}

TEST(InferenceModel, RefusesTrustFormatsThatCannotCarryWhatTheSpecAsks) {
  auto refused = [](std::function<void(Json&)> edit, const std::string& field) {
    Json j = valid_model();
    edit(j);
    auto m = parse_inference_model(j);
    ASSERT_FALSE(m.ok()) << field;
    EXPECT_NE(m.error().message().find(field), std::string::npos) << m.error().message();
  };
  refused([](Json& j) { j["spec"]["artifact"]["trust"]["formats"] = {"sigstore"}; }, "trust.formats[0]");
  refused([](Json& j) { j["spec"]["artifact"]["trust"]["formats"] = {"oms", "oms"}; }, "trust.formats");
  // Only our statement carries a version; identities only mean something for OMS.
  refused([](Json& j) { j["spec"]["artifact"]["trust"]["formats"] = {"oms"}; }, "trust.minVersion");
  refused(
      [](Json& j) {
        j["spec"]["artifact"]["trust"]["identities"] = Json::array({{{"subject", "a"}, {"issuer", "b"}}});
      },
      "trust.identities");
  refused(
      [](Json& j) {
        j["spec"]["artifact"]["trust"]["formats"] = {"infergate", "oms"};
        j["spec"]["artifact"]["trust"]["identities"] = Json::array({{{"subject", ""}, {"issuer", "b"}}});
      },
      "identities[0].subject");
}

TEST(InferenceModel, RequiresAnImageForThirdPartyEngines) {
  Json j = valid_model();
  j["spec"]["engine"] = {{"kind", "vllm"}};
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("spec.engine.image"), std::string::npos);
}

TEST(InferenceModel, RefusesNamesThatCannotNameChildren) {
  for (const char* name :
       {"GLM", "9glm", "a-very-long-model-name-that-is-longer-than-forty-eight", "glm_4"}) {
    Json j = valid_model();
    j["metadata"]["name"] = name;
    EXPECT_FALSE(parse_inference_model(j).ok()) << name;
  }
}

TEST(InferenceModel, RefusesWrongKindAndDuplicateStages) {
  Json j = valid_model();
  j["kind"] = "Deployment";
  EXPECT_FALSE(parse_inference_model(j).ok());
  j = valid_model();
  j["spec"]["rollout"] = {{"stageOrder", {"weights", "weights"}}};
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("listed twice"), std::string::npos);
}

TEST(InferenceModel, RefusesWrongTypesWithoutThrowing) {
  Json j = valid_model();
  j["spec"]["serving"] = "int8";
  EXPECT_FALSE(parse_inference_model(j).ok());
  j = valid_model();
  j["spec"]["replicas"] = "two";
  EXPECT_FALSE(parse_inference_model(j).ok());
  j = valid_model();
  j["spec"]["resources"]["limits"]["memory"] = "lots";
  EXPECT_FALSE(parse_inference_model(j).ok());
  EXPECT_FALSE(parse_inference_model(Json::array()).ok());
}

TEST(InferenceModel, CapacityPlanningIsOptionalAndReadWhenGiven) {
  auto none = parse_inference_model(valid_model());
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  EXPECT_FALSE(none->spec.capacity_planning.configured());

  Json j = valid_model();
  j["spec"]["capacityPlanning"] = Json::parse(
      R"({"gpu": "h200", "modelConfig": {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}})");
  auto m = parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_TRUE(m->spec.capacity_planning.configured());
  EXPECT_EQ(m->spec.capacity_planning.gpu, "h200");
  EXPECT_EQ(m->spec.capacity_planning.model_config["hidden_size"], 4096);

  j["spec"]["capacityPlanning"] = Json::parse(R"({"gpuMemory": "80Gi"})");
  m = parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->spec.capacity_planning.gpu_memory, "80Gi");
  EXPECT_TRUE(m->spec.capacity_planning.model_config.is_null());
}

TEST(InferenceModel, CapacityPlanningRefusesBadInputNamingTheField) {
  auto refused = [](const char* planning, const char* field) {
    Json j = valid_model();
    j["spec"]["capacityPlanning"] = Json::parse(planning);
    auto m = parse_inference_model(j);
    ASSERT_FALSE(m.ok()) << planning;
    EXPECT_NE(m.error().message().find(field), std::string::npos) << m.error().message();
  };
  refused(R"({"gpu": "h200", "gpuMemory": "80GiB"})", "spec.capacityPlanning.gpu");
  refused(R"({"gpuMemory": "eighty gigs"})", "spec.capacityPlanning.gpuMemory");
  refused(R"({"gpuMemory": "-80GiB"})", "spec.capacityPlanning.gpuMemory");
  refused(R"({"gpu": 141})", "spec.capacityPlanning.gpu");
  refused(R"({"gpu": "h200", "modelConfig": "config.json"})", "spec.capacityPlanning.modelConfig");
  refused(R"("h200")", "spec.capacityPlanning");
}

TEST(InferenceModel, CapacityPlanningIsNotPartOfThePodConfiguration) {
  // Changing what the planner is told re-plans; it must not roll pods (the revision stays).
  auto a = parse_inference_model(valid_model());
  Json j = valid_model();
  j["spec"]["capacityPlanning"] = Json::parse(R"({"gpu": "h100", "modelConfig": {"hidden_size": 1}})");
  auto b = parse_inference_model(j);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(revision(pod_config(a->spec)), revision(pod_config(b->spec)));
}

TEST(InferenceModelStatus, RoundTripsThroughJson) {
  InferenceModelStatus s;
  s.observed_generation = 4;
  s.replicas = 2;
  s.ready_replicas = 1;
  ReleaseConfig r;
  r.serving = {WeightFormat::kInt8, KvCacheDtype::kFp8, 32768, 16};
  r.artifact_path = "glm/r3";
  r.release_digest = "sha256:" + std::string(64, 'a');
  r.release_version = 3;
  r.revision = "0123456789";
  r.summary = summarize(r.serving);
  s.stable = r;
  s.canary = CanaryStatus{r, "glm-canary", 1, 0};
  WallTime t = *parse_rfc3339("2026-11-29T19:30:00Z");
  s.stage = StageStatus{};
  s.stage->name = "kvCache";
  s.stage->revision = "0123456789";
  s.stage->phase = StagePhase::kAnalyzing;
  s.stage->started_at = t;
  s.stage->gate_results = {
      GateResult{"quality", "Passed", "ok", {{"meanKL", 0.001}}, {{"maxMeanKL", 0.01}}, t}};
  s.conditions.push_back({"Ready", "True", "Serving", "2/2", 4, t});
  s.history.push_back({"weights", "abc", "Promoted", "GatesPassed", "", t});
  s.failed_revisions = {"deadbeef00"};
  s.stage->from_revision = "abcdef0123";
  s.stage->analysis_started_at = t;
  s.stage->failed_at = t;
  s.stage->outcome = "RolledBack";
  s.stage->failure_reason = "QualityThresholdFailed";
  s.stage->failure_message = "quality gate: mean_kl 0.2 > 0.01";
  s.stable->pod_config = Json{{"serving", {{"weightFormat", "int8"}}}};
  s.control = RolloutControlStatus{"fedcba9876", "a1", "r1", true};
  auto back = parse_status(status_to_json(s));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(status_to_json(s)["stable"]["summary"], "int8/fp8 ctx=32768 x16");
}

TEST(InferenceModelStatus, MalformedStatusIsReplacedNotFatal) {
  Json j = valid_model();
  j["status"] = {{"stable", "nonsense"}};
  auto m = parse_inference_model(j);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->status.stable.has_value());
}

}  // namespace
}  // namespace infergate::op::api
