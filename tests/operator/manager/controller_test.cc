// The controller runner: results become forget/requeue/backoff; reconciles are counted.
#include "infergate/operator/manager/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "infergate/operator/manager/leader_guard.h"
#include "infergate/operator/manager/metrics.h"
#include "testing.h"

namespace infergate::op::manager {
namespace {

using namespace std::chrono_literals;

class ScriptedReconciler : public reconcile::Reconciler {
 public:
  Result<reconcile::Action> reconcile(const reconcile::Request& r) override {
    std::lock_guard lock(mu_);
    ++calls_[r.key()];
    if (fail_[r.key()] > 0) {
      --fail_[r.key()];
      return unavailable("API server down");
    }
    if (r.key() == "ns/poll") return reconcile::Action::requeue_after(30s);
    return reconcile::Action::await_change();
  }
  int calls(const std::string& k) {
    std::lock_guard lock(mu_);
    return calls_[k];
  }
  void fail(const std::string& k, int n) {
    std::lock_guard lock(mu_);
    fail_[k] = n;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> calls_, fail_;
};

TEST(Controller, RetriesErrorsWithBackoffAndForgetsOnSuccess) {
  FakeClock clock;
  ScriptedReconciler r;
  r.fail("ns/a", 2);
  Controller c(r, clock, ControllerOptions{"test", 1, 100ms, 10s}, nullptr);
  c.process("ns/a");  // fails: back off 100 ms
  EXPECT_EQ(c.queue().retries("ns/a"), 1);
  EXPECT_FALSE(c.queue().try_get());
  clock.advance(100ms);
  auto k = c.queue().try_get();
  ASSERT_TRUE(k);
  c.process(*k);  // fails again: 200 ms
  c.queue().done(*k);
  clock.advance(199ms);
  EXPECT_FALSE(c.queue().try_get());
  clock.advance(1ms);
  k = c.queue().try_get();
  ASSERT_TRUE(k);
  c.process(*k);  // succeeds
  c.queue().done(*k);
  EXPECT_EQ(c.queue().retries("ns/a"), 0);
  EXPECT_EQ(r.calls("ns/a"), 3);
  EXPECT_EQ(c.reconciles(), 3u);
}

TEST(Controller, RequeuesAfterTheReconcilersDelay) {
  FakeClock clock;
  ScriptedReconciler r;
  Controller c(r, clock, ControllerOptions{"test", 1, 100ms, 10s}, nullptr);
  c.process("ns/poll");
  clock.advance(29s);
  EXPECT_FALSE(c.queue().try_get());
  clock.advance(1s);
  EXPECT_EQ(*c.queue().try_get(), "ns/poll");
}

TEST(Controller, WorkersDrainTheQueueAndStopCleanly) {
  ScriptedReconciler r;
  OperatorMetrics metrics;
  Controller c(r, SystemClock::instance(), ControllerOptions{"test", 3, 100ms, 10s}, &metrics);
  for (int i = 0; i < 50; ++i) c.enqueue("ns/m" + std::to_string(i));
  c.start();
  ASSERT_TRUE(op::testing::eventually([&] { return c.reconciles() == 50; }));
  c.stop();
  std::string text = metrics.scrape();
  EXPECT_NE(text.find("infergate_operator_reconcile_total{controller=\"test\",result=\"success\"} 50"),
            std::string::npos)
      << text;
}

TEST(LeaderGuard, FencesWritesButNotReads) {
  auto s = op::testing::start_server();
  auto inner = op::testing::client_for(*s);
  std::atomic<bool> leading{false};
  LeaderGuard g(*inner, [&] { return leading.load(); });
  auto denied = g.create(client::kinds::deployment(), op::testing::deployment_json("web"));
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().reason(), "NotLeader");
  EXPECT_TRUE(g.list(client::kinds::deployment(), "default", {}).ok());
  leading = true;
  EXPECT_TRUE(g.create(client::kinds::deployment(), op::testing::deployment_json("web")).ok());
}

}  // namespace
}  // namespace infergate::op::manager
