// The stage planner: which stages, in which order, with which revisions.
#include "infergate/operator/rollout/stages.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <random>

#include "api/testdata.h"
#include "infergate/operator/api/inference_model.h"

namespace infergate::op::rollout {
namespace {

using infergate::testing::refused;

using api::StageName;

api::PodConfig base() {
  auto m = api::parse_inference_model(api::testing::valid_model());
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  api::PodConfig c = api::pod_config(m->spec);
  c.serving.weight_format = api::WeightFormat::kFp16;
  c.serving.kv_cache_dtype = api::KvCacheDtype::kFp16;
  c.serving.max_context_length = 8192;
  c.serving.max_concurrency = 8;
  c.artifact.path = "glm-4-9b/fp16";
  return c;
}

const std::vector<StageName> kDefault{StageName::kWeights, StageName::kKvCache, StageName::kCapacity};

std::vector<StageName> names(const std::vector<Stage>& s) {
  std::vector<StageName> out;
  for (const auto& x : s) out.push_back(x.name);
  return out;
}

TEST(StagePlanner, NothingDiffersMeansNoStages) {
  EXPECT_TRUE(plan_stages(base(), base(), kDefault).empty());
}

TEST(StagePlanner, WeightsThenKvCacheThenCapacityByDefault) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt8;
  want.artifact.path = "glm-4-9b/int8";
  want.serving.kv_cache_dtype = api::KvCacheDtype::kInt8;
  want.serving.max_context_length = 32768;
  auto stages = plan_stages(base(), want, kDefault);
  ASSERT_EQ(names(stages),
            (std::vector<StageName>{StageName::kWeights, StageName::kKvCache, StageName::kCapacity}));
  // Weights first, with fp16 KV (the safe order): the KV dtype is still the stable one.
  EXPECT_EQ(stages[0].to.serving.weight_format, api::WeightFormat::kInt8);
  EXPECT_EQ(stages[0].to.artifact.path, "glm-4-9b/int8");
  EXPECT_EQ(stages[0].to.serving.kv_cache_dtype, api::KvCacheDtype::kFp16);
  EXPECT_EQ(stages[0].to.serving.max_context_length, 8192);
  EXPECT_EQ(stages[1].to.serving.kv_cache_dtype, api::KvCacheDtype::kInt8);
  EXPECT_EQ(stages[1].to.serving.max_context_length, 8192);
  EXPECT_EQ(api::revision(stages[2].to), api::revision(want));
  EXPECT_NE(stages[0].change.find("weightFormat fp16 -> int8"), std::string::npos) << stages[0].change;
  EXPECT_NE(stages[0].change.find("artifact.path glm-4-9b/fp16 -> glm-4-9b/int8"), std::string::npos);
}

TEST(StagePlanner, EachStageStartsWhereThePreviousEnded) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt4;
  want.serving.kv_cache_dtype = api::KvCacheDtype::kFp8;
  want.serving.max_concurrency = 32;
  auto stages = plan_stages(base(), want, kDefault);
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(api::revision(stages[0].from), api::revision(base()));
  for (size_t i = 1; i < stages.size(); ++i)
    EXPECT_EQ(api::revision(stages[i].from), api::revision(stages[i - 1].to));
  for (const auto& s : stages) EXPECT_EQ(s.revision, api::revision(s.to));
}

TEST(StagePlanner, StageOrderFromTheSpecIsFollowed) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt8;
  want.serving.kv_cache_dtype = api::KvCacheDtype::kInt8;
  auto stages = plan_stages(base(), want, {StageName::kKvCache, StageName::kWeights});
  EXPECT_EQ(names(stages), (std::vector<StageName>{StageName::kKvCache, StageName::kWeights}));
  // The KV canary runs the stable weights.
  EXPECT_EQ(stages[0].to.serving.weight_format, api::WeightFormat::kFp16);
}

TEST(StagePlanner, NewReleaseOfTheSameFormatIsItsOwnStageAndGoesFirst) {
  api::PodConfig want = base();
  want.artifact.path = "glm-4-9b/fp16-r4";
  want.serving.kv_cache_dtype = api::KvCacheDtype::kInt8;
  auto stages = plan_stages(base(), want, kDefault);
  ASSERT_EQ(names(stages), (std::vector<StageName>{StageName::kArtifact, StageName::kKvCache}));
  EXPECT_EQ(stages[0].to.artifact.path, "glm-4-9b/fp16-r4");
  EXPECT_EQ(stages[0].to.serving.kv_cache_dtype, api::KvCacheDtype::kFp16);
}

TEST(StagePlanner, ANewWeightFormatCarriesItsArtifactInTheWeightsStage) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt8;
  want.artifact.path = "glm-4-9b/int8";
  EXPECT_EQ(names(plan_stages(base(), want, kDefault)), (std::vector<StageName>{StageName::kWeights}));
}

TEST(StagePlanner, EngineImageChangeIsAReleaseStage) {
  api::PodConfig want = base();
  want.engine.image = "infergate/runtime:0.2.0";
  auto stages = plan_stages(base(), want, kDefault);
  ASSERT_EQ(names(stages), (std::vector<StageName>{StageName::kArtifact}));
  EXPECT_NE(stages[0].change.find("engine.image"), std::string::npos);
}

TEST(StagePlanner, AnOperatorsNewImagesAreAnArtifactStageOfTheirOwn) {
  api::PodConfig stable = base();
  stable.images = {"infergate/agent:0.1.0", "infergate/runtime:0.1.0", "infergate/runtime-cuda:0.1.0"};
  api::PodConfig desired = stable;
  desired.images.agent = "infergate/agent:0.2.0";
  auto stages = plan_stages(stable, desired, kDefault);
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].name, StageName::kArtifact);
  EXPECT_EQ(stages[0].change, "agent image infergate/agent:0.1.0 -> infergate/agent:0.2.0");
  EXPECT_EQ(stages[0].to.images, desired.images);
  EXPECT_NE(stages[0].revision, api::revision(stable));
  // With a spec change too, the images still go first, apart from the format change.
  desired.serving.kv_cache_dtype = api::KvCacheDtype::kInt8;
  stages = plan_stages(stable, desired, kDefault);
  ASSERT_EQ(names(stages), (std::vector<StageName>{StageName::kArtifact, StageName::kKvCache}));
  EXPECT_EQ(stages[1].change, "kvCacheDtype fp16 -> int8");
  // Images that were never recorded are left out of the revision (statuses written before them).
  api::PodConfig unrecorded = base();
  EXPECT_FALSE(api::canonical_json(unrecorded).contains("images"));
  EXPECT_TRUE(api::canonical_json(stable).contains("images"));
  auto back = api::pod_config_from_json(api::canonical_json(stable));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->images, stable.images);
}

TEST(StagePlanner, ResourcesAndSchedulingGoWithCapacity) {
  api::PodConfig want = base();
  want.resources.limits["nvidia.com/gpu"] = "2";
  want.scheduling.node_selector["gpu"] = "h200";
  auto stages = plan_stages(base(), want, kDefault);
  ASSERT_EQ(names(stages), (std::vector<StageName>{StageName::kCapacity}));
  EXPECT_NE(stages[0].change.find("resources.limits"), std::string::npos);
  EXPECT_NE(stages[0].change.find("scheduling"), std::string::npos);
}

TEST(StagePlanner, UnlistedStagesRunAfterTheListedOnes) {
  EXPECT_EQ(effective_order({StageName::kCapacity}),
            (std::vector<StageName>{StageName::kArtifact, StageName::kCapacity, StageName::kWeights,
                                    StageName::kKvCache}));
  EXPECT_EQ(effective_order({StageName::kKvCache, StageName::kArtifact}),
            (std::vector<StageName>{StageName::kKvCache, StageName::kArtifact, StageName::kWeights,
                                    StageName::kCapacity}));
}

TEST(StagePlanner, RevisionsAreDeterministicAcrossCalls) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt8;
  want.serving.kv_cache_dtype = api::KvCacheDtype::kInt4;
  auto a = plan_stages(base(), want, kDefault);
  auto b = plan_stages(base(), want, kDefault);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].revision, b[i].revision);
}

TEST(StagePlanner, ChangingALaterStageLeavesEarlierRevisionsAlone) {
  api::PodConfig want = base();
  want.serving.weight_format = api::WeightFormat::kInt8;
  want.serving.kv_cache_dtype = api::KvCacheDtype::kInt8;
  api::PodConfig want2 = want;
  want2.serving.kv_cache_dtype = api::KvCacheDtype::kFp8;
  auto a = plan_stages(base(), want, kDefault);
  auto b = plan_stages(base(), want2, kDefault);
  EXPECT_EQ(a[0].revision, b[0].revision);
  EXPECT_NE(a[1].revision, b[1].revision);
}

// Every combination of the dimensions, every order: the stages are non-empty changes, one per stage
// name, and applying them all ends exactly at the desired configuration.
TEST(StagePlanner, AllStagesTogetherAlwaysReachTheDesiredConfiguration) {
  std::mt19937 rng(20261129);
  const std::vector<std::vector<StageName>> orders = {
      kDefault,
      {StageName::kCapacity, StageName::kKvCache, StageName::kWeights, StageName::kArtifact},
      {StageName::kArtifact},
      {}};
  for (int trial = 0; trial < 400; ++trial) {
    api::PodConfig from = base(), to = base();
    auto flip = [&](auto&& f) {
      if (rng() % 2) f();
    };
    flip([&] { to.serving.weight_format = api::WeightFormat::kInt4; });
    flip([&] { to.serving.kv_cache_dtype = api::KvCacheDtype::kInt8; });
    flip([&] { to.serving.max_context_length = 65536; });
    flip([&] { to.serving.max_concurrency = 64; });
    flip([&] { to.artifact.path = "glm-4-9b/other"; });
    flip([&] { to.artifact.trust.min_version = 9; });
    flip([&] { to.engine.image = "x:2"; });
    flip([&] { to.engine.args = {"--foo"}; });
    flip([&] { to.resources.limits["memory"] = "1Ti"; });
    flip([&] { to.scheduling.runtime_class_name = "nvidia"; });
    flip([&] { from.serving.kv_cache_dtype = api::KvCacheDtype::kFp8; });
    const auto& order = orders[trial % orders.size()];
    auto stages = plan_stages(from, to, order);
    SCOPED_TRACE("trial " + std::to_string(trial) + " (seed 20261129)");
    if (api::revision(from) == api::revision(to)) {
      EXPECT_TRUE(stages.empty());
      continue;
    }
    ASSERT_FALSE(stages.empty());
    EXPECT_EQ(api::revision(stages.back().to), api::revision(to));
    std::set<StageName> seen;
    for (const auto& s : stages) {
      EXPECT_TRUE(seen.insert(s.name).second);
      EXPECT_NE(api::revision(s.from), api::revision(s.to));
      EXPECT_FALSE(s.change.empty());
    }
  }
}

TEST(StagePlanner, FailuresApplyOnlyToTheSpecTheyFailedUnder) {
  EXPECT_TRUE(failures_apply("abc", "abc"));
  EXPECT_FALSE(failures_apply("abc", "abd"));
  EXPECT_FALSE(failures_apply("", "abc"));
}

TEST(PodConfigJson, RoundTripsThroughStatus) {
  api::PodConfig c = base();
  c.artifact.volume.kind = api::VolumeSource::Kind::kNfs;
  c.artifact.volume.nfs_server = "nfs.local";
  c.artifact.volume.nfs_path = "/export";
  c.engine.args = {"--a", "b"};
  c.scheduling.tolerations = Json::array({{{"key", "gpu"}, {"operator", "Exists"}}});
  auto back = api::pod_config_from_json(api::canonical_json(c));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(api::canonical_json(*back), api::canonical_json(c));
  EXPECT_TRUE(refused(api::pod_config_from_json(Json::object()), "", {"podConfig.artifact.volume"}));
}

}  // namespace
}  // namespace infergate::op::rollout
