// The work queue: de-duplication, one worker per key, delays and backoff on a fake clock.
#include "infergate/operator/workqueue/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "common/eventually.h"
#include "infergate/operator/workqueue/stop_signal.h"

namespace infergate::op::workqueue {
namespace {

using namespace std::chrono_literals;
using infergate::testing::eventually;

std::unique_ptr<RateLimiter> limiter() { return std::make_unique<ExponentialRateLimiter>(100ms, 1s); }

TEST(WorkQueue, DeduplicatesKeysThatAreWaiting) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add("a");
  q.add("b");
  q.add("a");
  EXPECT_EQ(q.len(), 2u);
  EXPECT_EQ(*q.try_get(), "a");
  EXPECT_EQ(*q.try_get(), "b");
  EXPECT_FALSE(q.try_get());
}

TEST(WorkQueue, NeverHandsOutAKeyTwiceBeforeDone) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add("a");
  auto k = q.try_get();
  ASSERT_TRUE(k);
  q.add("a");  // changed while a worker holds it
  EXPECT_FALSE(q.try_get());
  q.done("a");
  EXPECT_EQ(*q.try_get(), "a");  // comes back once
  q.done("a");
  EXPECT_FALSE(q.try_get());
}

TEST(WorkQueue, ConcurrentWorkersNeverShareAKey) {
  WorkQueue q(SystemClock::instance(), limiter());
  std::atomic<int> in_flight_a{0}, max_a{0}, handled{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.get()) {
        if (*key == "a") {
          int now = ++in_flight_a;
          max_a = std::max(max_a.load(), now);
          std::this_thread::sleep_for(200us);
          --in_flight_a;
        }
        ++handled;
        q.done(*key);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) q.add(i % 3 == 0 ? "a" : "k" + std::to_string(i % 50));
  while (q.len() > 0 || q.processing() > 0) std::this_thread::sleep_for(1ms);
  q.shutdown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(max_a.load(), 1);
  EXPECT_GT(handled.load(), 0);
}

TEST(WorkQueue, AddAfterWaitsForTheClock) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add_after("a", 10s);
  q.add_after("a", 20s);  // a later deadline does not postpone the earlier one
  EXPECT_FALSE(q.try_get());
  clock.advance(9s);
  EXPECT_FALSE(q.try_get());
  clock.advance(1s);
  EXPECT_EQ(*q.try_get(), "a");
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(WorkQueue, EarlierAddAfterReplacesALaterOne) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add_after("a", 20s);
  q.add_after("a", 5s);
  clock.advance(5s);
  EXPECT_EQ(*q.try_get(), "a");
}

TEST(WorkQueue, RateLimitedRetriesBackOffExponentiallyUntilForgotten) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add_rate_limited("a");  // 100 ms
  clock.advance(99ms);
  EXPECT_FALSE(q.try_get());
  clock.advance(1ms);
  ASSERT_TRUE(q.try_get());
  q.done("a");
  q.add_rate_limited("a");  // 200 ms
  clock.advance(199ms);
  EXPECT_FALSE(q.try_get());
  clock.advance(1ms);
  ASSERT_TRUE(q.try_get());
  q.done("a");
  EXPECT_EQ(q.retries("a"), 2);
  for (int i = 0; i < 10; ++i) q.add_rate_limited("b");
  EXPECT_EQ(q.retries("b"), 10);
  q.forget("a");
  EXPECT_EQ(q.retries("a"), 0);
  q.add_rate_limited("a");  // back to the base delay
  clock.advance(100ms);
  std::set<std::string> ready;
  while (auto k = q.try_get()) ready.insert(*k);
  EXPECT_EQ(ready, (std::set<std::string>{"a", "b"}));  // b waited 100 ms too: its first delay
}

TEST(WorkQueue, BlockingGetWakesWhenAFakeClockPassesTheDelay) {
  FakeClock clock;
  WorkQueue q(clock, limiter());
  q.add_after("a", 5s);
  std::optional<std::string> got;
  std::thread t([&] { got = q.get(); });
  EXPECT_TRUE(eventually([&] { return q.blocked() == 1; }));
  EXPECT_FALSE(got);  // blocked in get(), and the clock has not moved
  clock.advance(5s);
  t.join();
  EXPECT_EQ(*got, "a");
}

TEST(WorkQueue, ShutdownReleasesBlockedWorkers) {
  WorkQueue q(SystemClock::instance(), limiter());
  std::optional<std::string> got = "unset";
  std::thread t([&] { got = q.get(); });
  EXPECT_TRUE(eventually([&] { return q.blocked() == 1; }));
  q.shutdown();
  t.join();
  EXPECT_FALSE(got);
  q.add("x");
  EXPECT_EQ(q.len(), 0u);
}

struct CountingObserver : QueueObserver {
  int adds = 0, retries = 0;
  size_t depth = 0;
  std::chrono::nanoseconds waited{0};
  void on_add() override { ++adds; }
  void on_depth(size_t d) override { depth = d; }
  void on_wait(std::chrono::nanoseconds w) override { waited = w; }
  void on_retry() override { ++retries; }
};

TEST(WorkQueue, ReportsDepthLatencyAndRetries) {
  FakeClock clock;
  CountingObserver obs;
  WorkQueue q(clock, limiter(), &obs);
  q.add("a");
  q.add("a");
  EXPECT_EQ(obs.adds, 1);
  EXPECT_EQ(obs.depth, 1u);
  clock.advance(3s);
  q.try_get();
  EXPECT_EQ(obs.waited, 3s);
  EXPECT_EQ(obs.depth, 0u);
  q.add_rate_limited("a");
  EXPECT_EQ(obs.retries, 1);
}

TEST(StopSignal, WaitReturnsEarlyOnStopAndOnTheFakeClock) {
  FakeClock clock;
  StopSignal s;
  std::atomic<bool> result{false}, done{false};
  std::thread t([&] {
    result = s.wait_for(clock, 10s);
    done = true;
  });
  EXPECT_TRUE(eventually([&] { return s.waiters() == 1; }));
  EXPECT_FALSE(done);  // waiting, and the clock has not moved
  clock.advance(10s);
  t.join();
  EXPECT_TRUE(result);
  std::thread t2([&] { result = s.wait_for(SystemClock::instance(), 1h); });
  EXPECT_TRUE(eventually([&] { return s.waiters() == 1; }));
  s.stop();
  t2.join();
  EXPECT_FALSE(result);
  EXPECT_FALSE(s.wait_for(clock, 1s));  // already stopped
}

}  // namespace
}  // namespace infergate::op::workqueue
