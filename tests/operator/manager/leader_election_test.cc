// Lease leader election on a fake clock: one leader, takeover after expiry, fencing, hand-over.
#include "infergate/operator/manager/leader_election.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "testing.h"

namespace infergate::op::manager {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;
using infergate::testing::Fault;
using op::testing::start_server;

LeaderElectionConfig cfg(const std::string& id) {
  LeaderElectionConfig c;
  c.namespace_ = "default";
  c.identity = id;
  c.lease_duration = 15s;
  c.renew_deadline = 10s;
  c.retry_period = 2s;
  return c;
}

std::unique_ptr<client::RestClient> client_as(infergate::testing::FakeApiServer& s, const std::string& ua) {
  client::RetryPolicy p;
  p.max_attempts = 1;  // the elector's own loop is the retry
  return op::testing::client_for(s, nullptr, p, ua);
}

TEST(LeaderElection, OnlyOneCandidateLeads) {
  auto s = start_server();
  FakeClock clock;
  auto ca = client_as(*s, "a"), cb = client_as(*s, "b");
  LeaderElector a(*ca, cfg("a"), clock), b(*cb, cfg("b"), clock);
  EXPECT_TRUE(*a.try_acquire_or_renew());
  EXPECT_FALSE(*b.try_acquire_or_renew());
  EXPECT_TRUE(a.is_leader());
  EXPECT_FALSE(b.is_leader());
  EXPECT_EQ(b.observed_holder(), "a");
  clock.advance(2s);
  EXPECT_TRUE(*a.try_acquire_or_renew());  // renewals keep the record moving
  clock.advance(14s);
  EXPECT_FALSE(*b.try_acquire_or_renew());  // b saw the record change 14 s ago: still held
  Json lease =
      s->get("/apis/coordination.k8s.io/v1/namespaces/default/leases/infergate-operator-leader").body;
  EXPECT_EQ(lease["spec"]["holderIdentity"], "a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 15);
}

TEST(LeaderElection, ACutOffLeaderStopsWithinTheRenewDeadlineAndAnotherTakesOver) {
  auto s = start_server();
  FakeClock clock;
  auto ca = client_as(*s, "a"), cb = client_as(*s, "b");
  LeaderElector a(*ca, cfg("a"), clock), b(*cb, cfg("b"), clock);
  ASSERT_TRUE(*a.try_acquire_or_renew());
  ASSERT_FALSE(*b.try_acquire_or_renew());
  // a is cut off from the API server.
  s->add_fault(Fault{"", "/leases", "a", Fault::Watch::kAny, Fault::Kind::kStatus, 503, -1, {}, -1});
  clock.advance(9s);
  EXPECT_TRUE(refused(a.try_acquire_or_renew(), "ServiceUnavailable", {"reading the leader lease"}));
  EXPECT_TRUE(a.is_leader());  // within the renew deadline
  clock.advance(1s);
  EXPECT_FALSE(a.is_leader());              // 10 s without a renewal: fenced off, by its own clock
  EXPECT_FALSE(*b.try_acquire_or_renew());  // but the lease has not run out for b yet
  clock.advance(5s);
  EXPECT_TRUE(*b.try_acquire_or_renew());  // 15 s after b last saw it move
  EXPECT_TRUE(b.is_leader());
  Json lease =
      s->get("/apis/coordination.k8s.io/v1/namespaces/default/leases/infergate-operator-leader").body;
  EXPECT_EQ(lease["spec"]["holderIdentity"], "b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
}

TEST(LeaderElection, RunLoopLosesLeadershipWhenRenewalsFail) {
  auto s = start_server();
  FakeClock clock;
  auto ca = client_as(*s, "a");
  LeaderElector a(*ca, cfg("a"), clock);
  workqueue::StopSignal stop;
  std::atomic<int> started{0}, stopped{0};
  std::atomic<bool> clean{true};
  std::thread t([&] {
    clean = a.run(
        stop, [&] { ++started; }, [&] { ++stopped; });
  });
  ASSERT_TRUE(op::testing::eventually([&] { return started == 1; }));
  s->add_fault(Fault{"", "/leases", "a", Fault::Watch::kAny, Fault::Kind::kStatus, 500, -1, {}, -1});
  for (int i = 0; i < 8 && stopped == 0; ++i) {
    clock.advance(2s);
    op::testing::eventually([&] { return stopped == 1; }, 200ms);
  }
  t.join();
  EXPECT_EQ(stopped, 1);
  EXPECT_FALSE(clean);
  EXPECT_FALSE(a.is_leader());
}

TEST(LeaderElection, ACleanStopReleasesTheLeaseForAFastHandOver) {
  auto s = start_server();
  FakeClock clock;
  auto ca = client_as(*s, "a"), cb = client_as(*s, "b");
  LeaderElector a(*ca, cfg("a"), clock), b(*cb, cfg("b"), clock);
  workqueue::StopSignal stop;
  std::atomic<int> started{0};
  std::thread t([&] {
    a.run(
        stop, [&] { ++started; }, [] {});
  });
  ASSERT_TRUE(op::testing::eventually([&] { return started == 1; }));
  ASSERT_FALSE(*b.try_acquire_or_renew());
  stop.stop();
  t.join();
  EXPECT_TRUE(*b.try_acquire_or_renew());  // no need to wait out the lease
}

TEST(LeaderElection, RefusesInconsistentTimings) {
  auto c = cfg("a");
  c.renew_deadline = 20s;  // longer than the lease
  EXPECT_TRUE(refused(validate(c), "", {"lease duration must be longer than the renew deadline"}));
  c = cfg("");
  EXPECT_TRUE(refused(validate(c), "", {"identity is empty"}));
  EXPECT_TRUE(validate(cfg("a")).ok());
}

TEST(MicroTime, HasSixFractionalDigits) {
  WallTime t = *parse_rfc3339("2026-11-29T19:30:00Z") + std::chrono::microseconds(1234);
  EXPECT_EQ(format_micro_time(t), "2026-11-29T19:30:00.001234Z");
}

}  // namespace
}  // namespace infergate::op::manager
