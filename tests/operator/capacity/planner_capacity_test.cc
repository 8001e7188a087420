// The operator's capacity check against the runtime's planner: the verdict is the planner's plan for
// the pod configuration (same numbers, same reason words), tensor parallelism is the GPU count, the
// KV dtype changes what fits, and a spec that lacks what the planner needs is said, never blocked.
#include "infergate/operator/capacity/planner_capacity.h"

#include <gtest/gtest.h>

#include "infergate/common/fs.h"
#include "infergate/operator/api/names.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::capacity {
namespace {

Json fixture(const std::string& name) {
  auto text = read_file(std::string(INFERGATE_PLANNER_FIXTURES) + "/" + name);
  EXPECT_TRUE(text.ok()) << name;
  return Json::parse(*text);
}

api::PodConfig pod(api::WeightFormat wf, api::KvCacheDtype kv, int64_t context, int64_t concurrency,
                   const std::string& gpus = "1") {
  api::PodConfig c;
  c.artifact.volume.claim_name = "models";
  c.artifact.path = "llama-3-70b/r1";
  c.serving.weight_format = wf;
  c.serving.kv_cache_dtype = kv;
  c.serving.max_context_length = context;
  c.serving.max_concurrency = concurrency;
  c.resources.limits["nvidia.com/gpu"] = gpus;
  return c;
}

api::CapacityPlanningSpec planning(const std::string& gpu, const Json& config) {
  api::CapacityPlanningSpec p;
  p.gpu = gpu;
  p.model_config = config;
  return p;
}

// The planner called directly, as `infergate-runtime plan --config F --gpu G ...` would.
planner::Plan direct_plan(const std::string& fixture_name, const std::string& gpu, planner::WeightFormat wf,
                          kernels::KvDtype kv, int64_t context, int64_t concurrency, int64_t tp = 1) {
  auto loaded = planner::load_model(std::string(INFERGATE_PLANNER_FIXTURES) + "/" + fixture_name);
  EXPECT_TRUE(loaded.ok());
  planner::PlanInput in;
  in.config = loaded->config;
  in.gpu = gpu;
  in.weights.format = wf;
  in.kv_cache_dtype = kv;
  in.max_context_length = context;
  in.max_concurrency = concurrency;
  in.tensor_parallel = tp;
  auto p = planner::plan(in);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  return *p;
}

TEST(PlannerCapacity, AConfigurationThatFitsGetsThePlannersPlan) {
  PlannerCapacityChecker checker;
  auto v = checker.check(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 32768, 16),
                         planning("h200", fixture("glm-4-9b-chat-hf.json")), 2);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->checked);
  EXPECT_TRUE(v->fits);
  EXPECT_FALSE(v->blocks());
  EXPECT_EQ(v->condition_status(), "True");
  EXPECT_EQ(v->reason, "Fits");
  const planner::Plan p = direct_plan("glm-4-9b-chat-hf.json", "h200", planner::WeightFormat::kInt8,
                                      kernels::KvDtype::kInt8, 32768, 16);
  EXPECT_EQ(v->numbers.at("needed_bytes"), static_cast<double>(p.total_bytes));
  EXPECT_EQ(v->numbers.at("available_bytes"), static_cast<double>(p.available_bytes));
  EXPECT_EQ(v->numbers.at("weight_bytes"), static_cast<double>(p.weights.total()));
  EXPECT_EQ(v->numbers.at("kv_bytes"), static_cast<double>(p.kv_bytes));
  EXPECT_EQ(v->numbers.at("workspace_bytes"), static_cast<double>(p.workspace.total()));
  EXPECT_EQ(v->numbers.at("reserve_bytes"), static_cast<double>(p.reserves.total()));
  EXPECT_EQ(v->numbers.at("max_concurrency_at_context"), static_cast<double>(p.max_concurrency_at_context));
  // The message is the planner's, naming the artifact.
  EXPECT_NE(v->message.find("llama-3-70b/r1 int8 weights, int8 KV, 16 x 32768 tokens on h200"),
            std::string::npos)
      << v->message;
  EXPECT_NE(v->message.find("to spare"), std::string::npos) << v->message;
}

TEST(PlannerCapacity, RefusesWeightsThatDoNotFitWithNeededAndAvailableBytes) {
  PlannerCapacityChecker checker;
  auto v = checker.check(pod(api::WeightFormat::kFp16, api::KvCacheDtype::kFp16, 8192, 4),
                         planning("h100", fixture("llama-3-70b.json")), 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->checked);
  EXPECT_FALSE(v->fits);
  EXPECT_TRUE(v->blocks());
  EXPECT_EQ(v->condition_status(), "False");
  EXPECT_EQ(v->reason, "WeightsTooLarge");
  EXPECT_GT(v->numbers.at("needed_bytes"), v->numbers.at("available_bytes"));
  EXPECT_EQ(v->numbers.at("max_concurrency_at_context"), 0);
  EXPECT_NE(v->message.find("needs "), std::string::npos);
  EXPECT_NE(v->message.find(" per GPU"), std::string::npos);
  EXPECT_NE(v->message.find("at most 0 sequences at 8192 tokens"), std::string::npos) << v->message;
}

TEST(PlannerCapacity, TheKvCacheDtypeChangesWhatFits) {
  // int8 weights of a 70B model on one H100: the concurrency that int8 KV just holds is too much
  // for fp16 KV, which is what a kvCache stage changes.
  const planner::Plan int8kv =
      direct_plan("llama-3-70b.json", "h100", planner::WeightFormat::kInt8, kernels::KvDtype::kInt8, 8192, 1);
  const int64_t n = int8kv.max_concurrency_at_context;
  ASSERT_GT(n, 1);
  PlannerCapacityChecker checker;
  const api::CapacityPlanningSpec pl = planning("h100", fixture("llama-3-70b.json"));
  auto with_int8 = checker.check(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 8192, n), pl, 1);
  auto with_fp16 = checker.check(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kFp16, 8192, n), pl, 1);
  ASSERT_TRUE(with_int8 && with_fp16);
  EXPECT_TRUE(with_int8->fits) << with_int8->message;
  EXPECT_FALSE(with_fp16->fits);
  EXPECT_EQ(with_fp16->reason, "KvCacheTooLarge");
  EXPECT_LT(with_fp16->numbers.at("max_concurrency_at_context"), static_cast<double>(n));
  EXPECT_NE(with_fp16->message.find("short by"), std::string::npos) << with_fp16->message;
}

TEST(PlannerCapacity, TensorParallelismIsTheGpuCountOfTheResources) {
  PlannerCapacityChecker checker;
  auto v = checker.check(pod(api::WeightFormat::kFp16, api::KvCacheDtype::kFp16, 8192, 8, "4"),
                         planning("h100", fixture("llama-3-70b.json")), 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->numbers.at("tensor_parallel"), 4);
  const planner::Plan p = direct_plan("llama-3-70b.json", "h100", planner::WeightFormat::kF16,
                                      kernels::KvDtype::kF16, 8192, 8, 4);
  EXPECT_EQ(v->numbers.at("weight_bytes"), static_cast<double>(p.weights.total()));
  EXPECT_EQ(v->fits, p.fits);
  EXPECT_TRUE(v->fits) << v->message;  // 70B in fp16 over four H100s
  EXPECT_NE(v->message.find("on h100 x4"), std::string::npos) << v->message;
}

TEST(PlannerCapacity, GpuMemoryTakesKubernetesQuantitiesAndPlannerSizes) {
  PlannerCapacityChecker checker;
  api::CapacityPlanningSpec pl;
  pl.model_config = fixture("glm-4-9b-chat-hf.json");
  const auto config = pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 8192, 4);
  pl.gpu_memory = "80Gi";
  auto a = checker.check(config, pl, 1);
  pl.gpu_memory = "80GiB";
  auto b = checker.check(config, pl, 1);
  pl.gpu_memory = "80G";
  auto c = checker.check(config, pl, 1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->numbers.at("available_bytes"), 80.0 * (1 << 30));
  EXPECT_EQ(b->numbers.at("available_bytes"), 80.0 * (1 << 30));
  EXPECT_EQ(c->numbers.at("available_bytes"), 80e9);
}

TEST(PlannerCapacity, WithoutCapacityPlanningItSaysSoAndDoesNotBlock) {
  PlannerCapacityChecker checker;
  auto v = checker.check(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 32768, 16), {}, 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->checked);
  EXPECT_FALSE(v->blocks());
  EXPECT_EQ(v->condition_status(), "Unknown");
  EXPECT_EQ(v->reason, kReasonNotConfigured);
  EXPECT_NE(v->message.find("spec.capacityPlanning is not set"), std::string::npos) << v->message;
  EXPECT_NE(v->message.find("nothing is blocked"), std::string::npos);
}

TEST(PlannerCapacity, AMissingGpuOrModelConfigIsNamed) {
  PlannerCapacityChecker checker;
  const auto config = pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 32768, 16);
  auto no_gpu = checker.check(config, planning("", fixture("glm-4-9b-chat-hf.json")), 1);
  ASSERT_TRUE(no_gpu.has_value());
  EXPECT_FALSE(no_gpu->blocks());
  EXPECT_EQ(no_gpu->reason, kReasonGpuUnknown);
  EXPECT_NE(no_gpu->message.find("spec.capacityPlanning.gpu"), std::string::npos);
  auto no_config = checker.check(config, planning("h200", Json()), 1);
  ASSERT_TRUE(no_config.has_value());
  EXPECT_FALSE(no_config->blocks());
  EXPECT_EQ(no_config->reason, kReasonModelConfigUnknown);
  EXPECT_NE(no_config->message.find("spec.capacityPlanning.modelConfig"), std::string::npos);
}

TEST(PlannerCapacity, BadPlannerInputIsUnknownNamingTheField) {
  PlannerCapacityChecker checker;
  const auto config = pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 8192, 4);
  auto expect_named = [&](const api::PodConfig& c, const api::CapacityPlanningSpec& pl,
                          const std::string& what) {
    auto v = checker.check(c, pl, 1);
    ASSERT_TRUE(v.has_value());
    EXPECT_FALSE(v->checked);
    EXPECT_FALSE(v->blocks());
    EXPECT_EQ(v->reason, kReasonInvalidInput);
    EXPECT_NE(v->message.find(what), std::string::npos) << v->message;
  };
  Json broken = fixture("llama-3-70b.json");
  broken.erase("hidden_size");
  expect_named(config, planning("h100", broken), "spec.capacityPlanning.modelConfig");
  expect_named(config, planning("h100", broken), "hidden_size");
  expect_named(config, planning("b300", fixture("llama-3-70b.json")), "spec.capacityPlanning.gpu");
  // 3 GPUs do not divide 64 heads / 8 KV heads.
  expect_named(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 8192, 4, "3"),
               planning("h100", fixture("llama-3-70b.json")), "spec.resources");
}

TEST(PlannerCapacity, ReadsTheArtifactsConfigWhenTheOperatorCanSeeIt) {
  auto tmp = TempDir::create("capacity-artifact");
  ASSERT_TRUE(tmp.ok());
  const auto dir = tmp->path() / "models" / "llama-3-70b" / "r1";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_file_atomic(dir / "config.json", fixture("llama-3-70b.json").dump()).ok());
  PlannerCapacityOptions o;
  o.artifact_dir = [root = tmp->path()](const api::ArtifactSpec& a) -> std::optional<std::filesystem::path> {
    return root / a.volume.claim_name / a.path;
  };
  PlannerCapacityChecker checker(o);
  api::CapacityPlanningSpec pl;
  pl.gpu = "h100";
  auto v = checker.check(pod(api::WeightFormat::kFp16, api::KvCacheDtype::kFp16, 8192, 4), pl, 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->checked) << v->message;
  EXPECT_EQ(v->reason, "WeightsTooLarge");
  // A directory without config.json: said, not blocking.
  std::filesystem::remove(dir / "config.json");
  auto gone = checker.check(pod(api::WeightFormat::kFp16, api::KvCacheDtype::kFp16, 8192, 4), pl, 1);
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->blocks());
  EXPECT_EQ(gone->reason, kReasonModelConfigUnknown);
  EXPECT_NE(gone->message.find("config.json"), std::string::npos);
}

TEST(PlannerCapacity, RepeatedChecksGiveTheSameVerdict) {
  PlannerCapacityChecker checker(PlannerCapacityOptions{{}, 2});
  const auto pl = planning("h200", fixture("glm-4-9b-chat-hf.json"));
  std::vector<controllers::CapacityVerdict> seen;
  for (int i = 0; i < 6; ++i) {
    auto v =
        checker.check(pod(api::WeightFormat::kInt8, api::KvCacheDtype::kInt8, 4096 << (i % 3), 8), pl, 1);
    ASSERT_TRUE(v.has_value());
    if (i >= 3) {
      EXPECT_EQ(v->message, seen[static_cast<size_t>(i - 3)].message);
      EXPECT_EQ(v->numbers, seen[static_cast<size_t>(i - 3)].numbers);
    }
    seen.push_back(*v);
  }
}

TEST(PlannerCapacity, TheGlmExampleFitsItsGpuAsThePublishedConfigDoes) {
  auto text = read_file(std::string(INFERGATE_CRD_DIR) + "/examples/glm-4-9b-int8.yaml");
  ASSERT_TRUE(text.ok());
  auto docs = api::parse_yaml_documents(*text, "glm-4-9b-int8.yaml");
  ASSERT_TRUE(docs.ok() && docs->size() == 1u);
  auto m = api::parse_inference_model(docs->front());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  PlannerCapacityChecker checker;
  auto v = checker.check(api::pod_config(m->spec), m->spec.capacity_planning, m->spec.replicas);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->checked) << v->message;
  EXPECT_TRUE(v->fits) << v->message;
  // The example's inline config plans exactly as the published config.json does.
  auto from_file = checker.check(
      api::pod_config(m->spec), planning(m->spec.capacity_planning.gpu, fixture("glm-4-9b-chat-hf.json")), 2);
  ASSERT_TRUE(from_file.has_value());
  EXPECT_EQ(v->numbers, from_file->numbers);
}

}  // namespace
}  // namespace infergate::op::capacity
