// Names and revisions.
#include "infergate/operator/api/names.h"

#include <gtest/gtest.h>

#include "api/testdata.h"

namespace infergate::op::api {
namespace {

InferenceModelSpec spec() { return parse_inference_model(testing::valid_model())->spec; }

TEST(Names, WorkloadNamesAreDeterministic) {
  EXPECT_EQ(workload_name("glm", Track::kStable), "glm");
  EXPECT_EQ(workload_name("glm", Track::kCanary), "glm-canary");
  EXPECT_EQ(endpoint_name("glm"), "glm");
}

TEST(Revision, IgnoresReplicasAndRolloutPolicy) {
  auto a = spec();
  auto b = a;
  b.replicas = 7;
  b.rollout.canary.analysis_seconds = 5;
  EXPECT_EQ(revision(pod_config(a)), revision(pod_config(b)));
  EXPECT_EQ(revision(pod_config(a)).size(), 10u);
}

TEST(Revision, ChangesWithEveryServingKnob) {
  auto base = revision(pod_config(spec()));
  auto s = spec();
  s.serving.kv_cache_dtype = KvCacheDtype::kFp8;
  EXPECT_NE(revision(pod_config(s)), base);
  s = spec();
  s.serving.max_context_length = 65536;
  EXPECT_NE(revision(pod_config(s)), base);
  s = spec();
  s.artifact.path = "glm-4-9b/r4";
  EXPECT_NE(revision(pod_config(s)), base);
  s = spec();
  s.engine.args = {"--foo"};
  EXPECT_NE(revision(pod_config(s)), base);
}

TEST(Revision, ChangesWithTheTrustedFormatsButNotForObjectsThatSetNone) {
  auto base = revision(pod_config(spec()));
  auto s = spec();
  s.artifact.trust.formats = {};  // what an object written before the field existed has
  EXPECT_EQ(revision(pod_config(s)), base);
  EXPECT_FALSE(canonical_json(pod_config(s))["artifact"]["trust"].contains("formats"));
  s.artifact.trust.formats = {"oms"};
  s.artifact.trust.identities = {{"ci@example.com", "https://token.actions.githubusercontent.com"}};
  EXPECT_NE(revision(pod_config(s)), base);
  auto back = pod_config_from_json(canonical_json(pod_config(s)));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->artifact.trust.formats, std::vector<std::string>{"oms"});
  ASSERT_EQ(back->artifact.trust.identities.size(), 1u);
  EXPECT_EQ(back->artifact.trust.identities[0].issuer, "https://token.actions.githubusercontent.com");
}

TEST(Revision, ReleaseConfigCarriesSummaryAndRevision) {
  auto r = release_config(pod_config(spec()));
  EXPECT_EQ(r.summary, "int8/int8 ctx=32768 x16");
  EXPECT_EQ(r.revision, revision(pod_config(spec())));
  EXPECT_EQ(r.artifact_path, "glm-4-9b/r3");
}

TEST(ShortHash, IsAStableSha256Prefix) {
  // SHA-256("abc") = ba7816bf...
  EXPECT_EQ(short_hash("abc", 8), "ba7816bf");
}

}  // namespace
}  // namespace infergate::op::api
