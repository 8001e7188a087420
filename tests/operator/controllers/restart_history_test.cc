// Restarts within a window: counted across observations with the fake clock, placed at the container's
// termination time, never counted when their time cannot be in the window.
#include "infergate/operator/controllers/restart_history.h"

#include <gtest/gtest.h>

namespace infergate::op::controllers {
namespace {

using namespace std::chrono_literals;

const WallTime kStart = WallTime(std::chrono::seconds(1'800'000'000));

platform::WorkloadState pod(int restarts, std::optional<WallTime> last_terminated,
                            std::optional<WallTime> started, const std::string& name = "glm-7d9-0") {
  platform::WorkloadState w;
  w.exists = true;
  platform::PodState p;
  p.name = name;
  p.restarts = restarts;
  p.last_terminated_at = last_terminated;
  p.started_at = started;
  w.pods.push_back(p);
  return w;
}

int observe(RestartHistory& h, platform::WorkloadState w, WallTime now) {
  h.observe("models/glm", w, now);
  return w.pods[0].recent_restarts;
}

TEST(RestartHistory, APodThatRestartedFiveTimesOverAWeekIsNotCrashLooping) {
  RestartHistory h;
  FakeClock clock(kStart);
  const WallTime started = clock.wall_now();
  int restarts = 0;
  for (int day = 1; day <= 5; ++day) {
    clock.advance(std::chrono::hours(30));  // a restart every 30 hours, observed each time
    ++restarts;
    EXPECT_EQ(observe(h, pod(restarts, clock.wall_now() - 1min, started), clock.wall_now()), 1)
        << "day " << day;
  }
  // An operator that starts now sees five restarts of a pod a week old: only the last one is recent.
  RestartHistory fresh;
  EXPECT_EQ(observe(fresh, pod(5, clock.wall_now() - 1min, started), clock.wall_now()), 1);
  EXPECT_LT(1, kCrashLoopRestarts);
}

TEST(RestartHistory, ThreeRestartsInAMinuteAreACrashLoopEvenOfAPodThatRanForAWeek) {
  RestartHistory h;
  FakeClock clock(kStart);
  const WallTime started = clock.wall_now();
  clock.advance(std::chrono::hours(24 * 7));
  EXPECT_EQ(observe(h, pod(0, std::nullopt, started), clock.wall_now()), 0);
  // The kubelet's back-off: 10 s, 20 s, 40 s.
  int restarts = 0;
  for (auto gap : {10s, 20s, 40s}) {
    clock.advance(gap);
    ++restarts;
    observe(h, pod(restarts, clock.wall_now() - 1s, started), clock.wall_now());
  }
  EXPECT_EQ(observe(h, pod(3, clock.wall_now() - 1s, started), clock.wall_now()), 3);
  // Ten quiet minutes later the loop is over as far as the window goes.
  clock.advance(kCrashLoopWindow);
  EXPECT_EQ(observe(h, pod(3, clock.wall_now() - kCrashLoopWindow - 1s, started), clock.wall_now()), 0);
}

TEST(RestartHistory, AYoungPodsRestartsAreRecentOnFirstSight) {
  // Restarts of a pod started two minutes ago happened within the last two minutes.
  RestartHistory h;
  const WallTime now = kStart;
  EXPECT_EQ(observe(h, pod(3, now - 5s, now - 2min), now), 3);
}

TEST(RestartHistory, RestartsOfUnknownTimeCountOnlyWhenTheyCannotBeOld) {
  RestartHistory h;
  WallTime now = kStart;
  // No start time, no termination time: nothing known, nothing counted.
  EXPECT_EQ(observe(h, pod(4, std::nullopt, std::nullopt), now), 0);
  // Two more since the last look a minute ago: they happened within that minute.
  now += 1min;
  EXPECT_EQ(observe(h, pod(6, std::nullopt, std::nullopt), now), 2);
  // Several at once after a long gap (an operator that was down): the latest at its termination
  // time, the others at the earliest they can have been, which is outside the window.
  now += std::chrono::hours(2);
  EXPECT_EQ(observe(h, pod(9, now - 30s, std::nullopt), now), 1);
}

TEST(RestartHistory, APodMadeAgainUnderItsNameStartsOverAndForgetDropsAModel) {
  RestartHistory h;
  WallTime now = kStart;
  EXPECT_EQ(observe(h, pod(3, now - 1s, now - 1min), now), 3);
  now += 10s;
  EXPECT_EQ(observe(h, pod(0, std::nullopt, now - 2s), now), 0);  // its count went down: a new pod
  now += 10s;
  EXPECT_EQ(observe(h, pod(1, now - 1s, now - 12s), now), 1);
  h.forget("models/glm");
  EXPECT_EQ(observe(h, pod(1, std::nullopt, std::nullopt), now), 0);
  // A termination time ahead of the operator's clock counts now, not in the future.
  EXPECT_EQ(observe(h, pod(2, now + 1h, std::nullopt), now), 1);
  EXPECT_EQ(observe(h, pod(2, now + 1h, std::nullopt), now + kCrashLoopWindow), 0);
}

}  // namespace
}  // namespace infergate::op::controllers
