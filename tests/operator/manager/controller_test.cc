// The controller runner: results become forget/requeue/backoff; reconciles are counted.
#include "infergate/operator/manager/controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>

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

// A reconciler with a bug that throws for some keys: the last line catches it, has it recorded on the
// object, and backs off that key alone.
class ThrowingReconciler : public reconcile::Reconciler {
 public:
  Result<reconcile::Action> reconcile(const reconcile::Request& r) override {
    std::lock_guard lock(mu_);
    served_.push_back(r.key());
    if (r.key() == "ns/bad") throw std::runtime_error("type_error.302: type must be string, but is number");
    if (r.key() == "ns/odd") throw 42;  // not even a std::exception
    return reconcile::Action::await_change();
  }
  void record_failure(const reconcile::Request& r, const std::string& what) override {
    std::lock_guard lock(mu_);
    recorded_.emplace_back(r.key(), what);
  }
  std::vector<std::string> served() {
    std::lock_guard lock(mu_);
    return served_;
  }
  std::vector<std::pair<std::string, std::string>> recorded() {
    std::lock_guard lock(mu_);
    return recorded_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> served_;
  std::vector<std::pair<std::string, std::string>> recorded_;
};

TEST(Controller, AnExceptionFromOneReconcileIsRecordedAndBacksOffThatKeyWhileTheNextKeyIsServed) {
  FakeClock clock;
  ThrowingReconciler r;
  Controller c(r, clock, ControllerOptions{"test", 1, 100ms, 10s}, nullptr);
  c.enqueue("ns/bad");
  c.enqueue("ns/good");
  for (int i = 0; i < 2; ++i) {
    auto k = c.queue().try_get();
    ASSERT_TRUE(k);
    EXPECT_NO_THROW(c.process(*k));
    c.queue().done(*k);
  }
  EXPECT_EQ(r.served(), (std::vector<std::string>{"ns/bad", "ns/good"}));
  ASSERT_EQ(r.recorded().size(), 1u);
  EXPECT_EQ(r.recorded()[0].first, "ns/bad");
  EXPECT_NE(r.recorded()[0].second.find("type_error.302"), std::string::npos);
  // Only the key that threw backs off; the one served is forgotten.
  EXPECT_EQ(c.queue().retries("ns/bad"), 1);
  EXPECT_EQ(c.queue().retries("ns/good"), 0);
  EXPECT_FALSE(c.queue().try_get());
  clock.advance(100ms);
  EXPECT_EQ(c.queue().try_get(), std::optional<std::string>("ns/bad"));
}

TEST(Controller, WorkersKeepServingOtherKeysWhileOneKeyKeepsThrowing) {
  FakeClock clock;
  ThrowingReconciler r;
  Controller c(r, clock, ControllerOptions{"test", 1, 100ms, 10s}, nullptr);
  c.start();
  c.enqueue("ns/odd");
  c.enqueue("ns/bad");
  c.enqueue("ns/good");
  ASSERT_TRUE(op::testing::eventually([&] {
    auto s = r.served();
    return std::find(s.begin(), s.end(), "ns/good") != s.end();
  }));
  c.stop();
  const auto recorded = r.recorded();
  ASSERT_EQ(recorded.size(), 2u);
  EXPECT_EQ(recorded[0].first, "ns/odd");
  EXPECT_EQ(recorded[0].second, "an exception that is not a std::exception");
  EXPECT_EQ(recorded[1].first, "ns/bad");
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
