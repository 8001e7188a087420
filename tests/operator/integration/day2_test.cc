// Day-2 operations against the fake API server and the simulated cluster: scaling through the scale
// subresource (what HPA, KEDA and `kubectl scale` use), an operator upgrade with new images, and each
// model's PodDisruptionBudget.
#include <gtest/gtest.h>

#include <atomic>

#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;

const std::string kBudgets = "/apis/policy/v1/namespaces/models/poddisruptionbudgets";

class Day2 : public OperatorFixture {
 protected:
  // Counts every canary Deployment the server ever stores.
  void watch_for_canaries() {
    canary_sub_ = server_->subscribe([this](const infergate::testing::ChangeRecord& c) {
      if (c.resource == "apps/v1/deployments" && c.object["metadata"].value("name", "").ends_with("-canary"))
        ++canaries_;
    });
  }
  void TearDown() override {
    if (canary_sub_) server_->unsubscribe(canary_sub_);
    OperatorFixture::TearDown();
  }
  std::string init_image(const std::string& deployment) {
    Json d = server_->get(kDeploys + "/" + deployment).body;
    return d["spec"]["template"]["spec"]["initContainers"][0].value("image", "");
  }
  std::set<std::string> pod_names(const std::string& selector) {
    std::set<std::string> out;
    for (const auto& p : server_->list("/api/v1/namespaces/models/pods", selector)) {
      if (!p["metadata"].contains("deletionTimestamp")) out.insert(p["metadata"]["name"].get<std::string>());
    }
    return out;
  }

  int canary_sub_ = 0;
  std::atomic<int> canaries_{0};
};

TEST_F(Day2, AScaleThroughTheScaleSubresourceRollsThatManyStablePodsWithoutACanaryStage) {
  start_operator();
  watch_for_canaries();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));

  // What an HPA reads: spec and status replicas and the stable pods' selector.
  auto scale = server_->get(kModels + "/glm/scale");
  ASSERT_EQ(scale.status, 200) << scale.body.dump();
  EXPECT_EQ(scale.body["kind"], "Scale");
  EXPECT_EQ(scale.body["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(scale.body["spec"]["replicas"], 2);
  EXPECT_EQ(scale.body["status"]["replicas"], 2);
  const std::string selector = scale.body["status"].value("selector", "");
  EXPECT_EQ(selector, "serving.infergate.dev/model=glm,serving.infergate.dev/track=stable");
  EXPECT_EQ(pod_names(selector).size(), 2u);

  // What it writes: a PUT of the Scale.
  scale.body["spec"]["replicas"] = 4;
  auto put = server_->request("PUT", kModels + "/glm/scale", scale.body);
  ASSERT_EQ(put.status, 200) << put.body.dump();
  EXPECT_EQ(get_model("glm")["spec"]["replicas"], 4);
  EXPECT_EQ(get_model("glm")["metadata"]["generation"], 2);
  ASSERT_TRUE(eventually(
      [&] {
        Json st = get_model("glm")["status"];
        return st.value("observedGeneration", 0) == 2 && st.value("readyReplicas", 0) == 4 &&
               st.value("replicas", 0) == 4 && pod_names(selector).size() == 4;
      },
      20s))
      << get_model("glm")["status"].dump(2);
  EXPECT_EQ(server_->get(kModels + "/glm/scale").body["status"]["replicas"], 4);
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["spec"]["replicas"], 4);
  // Scaling is not a configuration change: no stage, no canary, no new revision.
  Json st = get_model("glm")["status"];
  EXPECT_FALSE(st.contains("stage"));
  EXPECT_EQ(canaries_.load(), 0);
  EXPECT_EQ(st["history"].size(), 1u) << st.dump(2);  // the first deployment only
  EXPECT_TRUE(events_for("glm", "StageStarted").empty());

  // A stale Scale is a conflict; a merge patch (kubectl scale) works; a negative count is refused.
  Json stale = scale.body;
  stale["spec"]["replicas"] = 3;
  EXPECT_EQ(server_->request("PUT", kModels + "/glm/scale", stale).status, 409);
  auto patched = server_->request("PATCH", kModels + "/glm/scale", Json{{"spec", {{"replicas", 3}}}},
                                  "application/merge-patch+json");
  ASSERT_EQ(patched.status, 200) << patched.body.dump();
  EXPECT_EQ(get_model("glm")["spec"]["replicas"], 3);
  auto negative = server_->request("PATCH", kModels + "/glm/scale", Json{{"spec", {{"replicas", -1}}}},
                                   "application/merge-patch+json");
  EXPECT_EQ(negative.status, 422) << negative.body.dump();
  ASSERT_TRUE(eventually([&] { return pod_names(selector).size() == 3; }, 20s));
  EXPECT_EQ(canaries_.load(), 0);
}

TEST_F(Day2, AnOperatorRestartedWithANewAgentImageChangesNoStablePodAndBringsItThroughAStage) {
  app::OperatorOptions o = options();
  o.images.agent = "registry.example/infergate/agent:1.0.0";
  start_operator(o);
  Json m = model_json("glm");
  m["spec"]["rollout"]["canary"]["analysisSeconds"] = 0;  // no gates: promote once verified and ready
  server_->create(kModels, m);
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  stop_operator();
  const Json before = server_->get(kDeploys + "/glm").body;
  const std::string selector = "serving.infergate.dev/model=glm,serving.infergate.dev/track=stable";
  const std::set<std::string> pods = pod_names(selector);
  ASSERT_EQ(pods.size(), 2u);
  watch_for_canaries();

  // The operator comes back as a new release, with a new agent.
  o.images.agent = "registry.example/infergate/agent:1.1.0";
  start_operator(o);
  // The new agent arrives as an artifact stage: a canary runs it while stable keeps the old one.
  ASSERT_TRUE(eventually([&] { return canaries_.load() > 0; }, 20s)) << get_model("glm")["status"].dump(2);
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["spec"]["template"], before["spec"]["template"]);
  EXPECT_EQ(pod_names(selector), pods);
  ASSERT_TRUE(eventually([&] { return !events_for("glm", "StageStarted").empty(); }));
  EXPECT_NE(
      events_for("glm", "StageStarted")[0]["message"].get<std::string>().find(
          "agent image registry.example/infergate/agent:1.0.0 -> registry.example/infergate/agent:1.1.0"),
      std::string::npos)
      << events_for("glm", "StageStarted")[0].dump();
  // Verified and ready, it is promoted: only then does stable take the new agent.
  ASSERT_TRUE(eventually(
      [&] {
        Json st = get_model("glm")["status"];
        return !st.contains("stage") && init_image("glm") == "registry.example/infergate/agent:1.1.0";
      },
      30s))
      << get_model("glm")["status"].dump(2);
  Json st = get_model("glm")["status"];
  EXPECT_EQ(st["history"].back()["stage"], "artifact");
  EXPECT_EQ(st["history"].back()["outcome"], "Promoted");
  EXPECT_EQ(st["stable"]["podConfig"]["images"]["agent"], "registry.example/infergate/agent:1.1.0");
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
}

TEST_F(Day2, EachModelHasAPodDisruptionBudgetOverItsStablePodsThatGoesWithIt) {
  start_operator();
  Json created = server_->create(kModels, model_json("glm", "int8", 8)).body;
  ASSERT_TRUE(eventually([&] { return server_->get(kBudgets + "/glm").ok(); }));
  Json pdb = server_->get(kBudgets + "/glm").body;
  EXPECT_EQ(pdb["spec"]["maxUnavailable"], 2);  // a quarter of eight
  EXPECT_EQ(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
  EXPECT_EQ(pdb["spec"]["selector"]["matchLabels"],
            Json({{"serving.infergate.dev/model", "glm"}, {"serving.infergate.dev/track", "stable"}}));
  ASSERT_EQ(pdb["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(pdb["metadata"]["ownerReferences"][0]["uid"], created["metadata"]["uid"]);
  // It follows spec.replicas.
  Json m = get_model("glm");
  m["spec"]["replicas"] = 2;
  ASSERT_EQ(server_->update(kModels + "/glm", m).status, 200);
  ASSERT_TRUE(
      eventually([&] { return server_->get(kBudgets + "/glm").body["spec"]["maxUnavailable"] == 1; }));
  // And goes with the model.
  ASSERT_EQ(server_->remove(kModels + "/glm").status, 200);
  ASSERT_TRUE(eventually([&] { return server_->get(kBudgets + "/glm").status == 404; }));
}

}  // namespace
}  // namespace infergate::op::testing
