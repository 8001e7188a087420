// The watcher state machine against the fake API server.
#include "infergate/operator/cache/watcher.h"

#include <gtest/gtest.h>

#include "testing.h"

namespace infergate::op::cache {
namespace {

using infergate::testing::Fault;
using op::testing::client_for;
using op::testing::deployment_json;
using op::testing::start_server;

TEST(Watcher, ListsThenWatchesThenReportsChanges) {
  auto s = start_server();
  auto c = client_for(*s);
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("a")).ok());
  Watcher w(*c, client::kinds::deployment(), {});
  EXPECT_EQ(w.state(), Watcher::State::kEmpty);
  auto listed = w.step();
  ASSERT_TRUE(listed.ok());
  ASSERT_TRUE(listed->has_value());
  EXPECT_EQ((*listed)->type, WatcherEvent::Type::kRestarted);
  EXPECT_EQ((*listed)->objects.size(), 1u);
  EXPECT_EQ(w.state(), Watcher::State::kInitListed);
  ASSERT_TRUE(w.step().ok());  // opens the watch
  EXPECT_EQ(w.state(), Watcher::State::kWatching);
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("b")).ok());
  ASSERT_TRUE(c->remove(client::kinds::deployment(), "default", "a").ok());
  std::vector<WatcherEvent::Type> seen;
  while (seen.size() < 2) {
    auto ev = w.step();
    ASSERT_TRUE(ev.ok()) << ev.error().to_string();
    if (ev->has_value()) seen.push_back((*ev)->type);
  }
  EXPECT_EQ(seen,
            (std::vector<WatcherEvent::Type>{WatcherEvent::Type::kApplied, WatcherEvent::Type::kDeleted}));
}

TEST(Watcher, RelistsAfter410Gone) {
  auto s = start_server();
  auto c = client_for(*s);
  Watcher w(*c, client::kinds::deployment(), {});
  ASSERT_TRUE(w.step().ok());  // list
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("a")).ok());
  s->compact();  // the listed version is now older than the history
  auto open = w.step();
  if (open.ok()) {  // the server answers the watch with an ERROR 410 event
    ASSERT_EQ(w.state(), Watcher::State::kWatching);
    auto ev = w.step();
    ASSERT_FALSE(ev.ok());
    EXPECT_EQ(ev.error().reason(), "Expired");
  } else {
    EXPECT_EQ(open.error().reason(), "Expired");
  }
  EXPECT_EQ(w.state(), Watcher::State::kEmpty);
  auto relist = w.step();
  ASSERT_TRUE(relist.ok() && relist->has_value());
  EXPECT_EQ((*relist)->type, WatcherEvent::Type::kRestarted);
  EXPECT_EQ((*relist)->objects.size(), 1u);
}

TEST(Watcher, ResumesFromTheLastVersionAfterABrokenStream) {
  auto s = start_server();
  auto c = client_for(*s);
  Watcher w(*c, client::kinds::deployment(), {});
  ASSERT_TRUE(w.step().ok());
  ASSERT_TRUE(w.step().ok());
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("a")).ok());
  auto ev = w.step();
  ASSERT_TRUE(ev.ok() && ev->has_value());
  ASSERT_TRUE(op::testing::eventually([&] { return s->open_watches() == 1; }));
  s->drop_watches();
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("b")).ok());  // while disconnected
  auto broken = w.step();
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().reason(), "WatchFailed");
  EXPECT_EQ(w.state(), Watcher::State::kInitListed);
  ASSERT_TRUE(w.step().ok());  // re-watch from the last version
  auto missed = w.step();
  ASSERT_TRUE(missed.ok() && missed->has_value());
  EXPECT_EQ(client::object_name((*missed)->objects[0]), "b");  // nothing lost
}

TEST(Watcher, ListFailureIsTypedAndLeavesTheStateEmpty) {
  auto s = start_server();
  client::RetryPolicy p;
  p.max_attempts = 1;
  auto c = client_for(*s, nullptr, p);
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kNever, Fault::Kind::kStatus, 500, -1, {}, 1});
  Watcher w(*c, client::kinds::deployment(), {});
  auto ev = w.step();
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.error().reason(), "ListFailed");
  EXPECT_EQ(w.state(), Watcher::State::kEmpty);
}

}  // namespace
}  // namespace infergate::op::cache
