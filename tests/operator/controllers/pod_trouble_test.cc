// Why pods do not run, from what the platform reports: which troubles heal by waiting, which do not,
// and that the words stay the same from one back-off to the next.
#include "infergate/operator/controllers/pod_trouble.h"

#include <gtest/gtest.h>

#include "infergate/operator/controllers/restart_history.h"

namespace infergate::op::controllers {
namespace {

platform::WorkloadState one_pod(std::function<void(platform::PodState&)> edit) {
  platform::WorkloadState w;
  w.exists = true;
  w.replicas = 1;
  w.pods.resize(1);
  w.pods[0].name = "glm-canary-0";
  w.pods[0].revision = "r1";
  edit(w.pods[0]);
  return w;
}

TEST(PodTrouble, NoneWhilePodsAreOnTheirWay) {
  EXPECT_FALSE(
      workload_trouble(one_pod([](platform::PodState& p) { p.waiting_reason = "ContainerCreating"; }), "r1"));
  EXPECT_FALSE(workload_trouble(
      one_pod([](platform::PodState& p) { p.verify.waiting_reason = "PodInitializing"; }), ""));
  EXPECT_FALSE(workload_trouble(platform::WorkloadState{}, ""));
}

TEST(PodTrouble, UnschedulableHealsAndNamesTheResource) {
  auto t = workload_trouble(one_pod([](platform::PodState& p) {
                              p.unschedulable = true;
                              p.schedule_message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.";
                            }),
                            "r1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->reason, "Unschedulable");
  EXPECT_TRUE(t->heals);
  EXPECT_EQ(t->message,
            "pod glm-canary-0: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
}

TEST(PodTrouble, ACrashLoopIsToldByItsLastExitNotItsBackOff) {
  auto w = one_pod([](platform::PodState& p) {
    p.waiting_reason = "CrashLoopBackOff";
    p.restarts = 5;
    p.recent_restarts = 3;
    p.last_termination_reason = "OOMKilled";
    p.last_exit_code = 137;
  });
  auto t = workload_trouble(w, "r1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->reason, "OOMKilled");
  EXPECT_FALSE(t->heals);
  EXPECT_EQ(t->message, "pod glm-canary-0: OOMKilled (last exit: OOMKilled, code 137)");
  w.pods[0].restarts = 9;  // another back-off: same words, so status is not rewritten
  w.pods[0].recent_restarts = 5;
  EXPECT_EQ(workload_trouble(w, "r1")->message, t->message);
}

TEST(PodTrouble, RestartsOverAPodsLifetimeAreNoCrashLoopOnlyRestartsWithinTheWindowAre) {
  // Five restarts over a week, one of them just now: the kubelet's back-off before the restart is
  // shown as CrashLoopBackOff, but this is a pod that restarts now and then.
  auto w = one_pod([](platform::PodState& p) {
    p.waiting_reason = "CrashLoopBackOff";
    p.restarts = 5;
    p.recent_restarts = 1;
  });
  EXPECT_FALSE(workload_trouble(w, "r1")) << workload_trouble(w, "r1")->message;
  w.pods[0].recent_restarts = kCrashLoopRestarts;
  ASSERT_TRUE(workload_trouble(w, "r1"));
  EXPECT_EQ(workload_trouble(w, "r1")->reason, "CrashLoopBackOff");
}

TEST(PodTrouble, AnImageThatCannotBePulledHealsAnInvalidNameDoesNot) {
  auto pull = workload_trouble(one_pod([](platform::PodState& p) {
                                 p.waiting_reason = "ImagePullBackOff";
                                 p.message = "Back-off pulling image \"vllm:nope\"";
                               }),
                               "r1");
  ASSERT_TRUE(pull);
  EXPECT_TRUE(pull->heals);
  EXPECT_EQ(pull->message, "pod glm-canary-0: ImagePullBackOff: Back-off pulling image \"vllm:nope\"");
  auto invalid =
      workload_trouble(one_pod([](platform::PodState& p) { p.waiting_reason = "InvalidImageName"; }), "r1");
  ASSERT_TRUE(invalid);
  EXPECT_FALSE(invalid->heals);
  auto agent = workload_trouble(
      one_pod([](platform::PodState& p) { p.verify.waiting_reason = "ErrImagePull"; }), "r1");
  ASSERT_TRUE(agent);
  EXPECT_EQ(agent->message, "pod glm-canary-0: verify: ErrImagePull");
}

TEST(PodTrouble, ARefusedPodNeverHealsUnlessAQuotaFreesUp) {
  platform::WorkloadState w;
  w.exists = true;
  w.failure_reason = "FailedCreate";
  w.failure_message =
      "pods \"glm-x\" is forbidden: violates PodSecurity \"restricted:latest\": restricted volume "
      "types (volume \"model-artifacts\" uses restricted volume type \"nfs\")";
  auto t = workload_trouble(w, "");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->reason, "FailedCreate");
  EXPECT_FALSE(t->heals);
  EXPECT_NE(trouble_hint(*t).find("PersistentVolumeClaim bound to an NFS PersistentVolume"),
            std::string::npos);
  w.failure_message = "pods \"glm-x\" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=1";
  EXPECT_TRUE(workload_trouble(w, "")->heals);
}

TEST(PodTrouble, OnlyThePodsOfTheRevisionAskedFor) {
  auto w = one_pod([](platform::PodState& p) { p.waiting_reason = "InvalidImageName"; });
  EXPECT_FALSE(workload_trouble(w, "r2"));
  w.pods[0].deleting = true;
  EXPECT_FALSE(workload_trouble(w, ""));
}

}  // namespace
}  // namespace infergate::op::controllers
