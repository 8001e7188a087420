// Informers: handlers, re-lists that lose nothing, backoff without a hot loop.
#include "infergate/operator/cache/informer.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <set>

#include "infergate/operator/cache/informer_cache.h"
#include "testing.h"

namespace infergate::op::cache {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;
using infergate::testing::Fault;
using op::testing::client_for;
using op::testing::deployment_json;
using op::testing::eventually;
using op::testing::start_server;

struct Recorder {
  std::mutex mu;
  std::set<std::string> live;
  std::vector<std::string> log;
  EventHandler handler() {
    return EventHandler{[this](const Json& o) {
                          std::lock_guard l(mu);
                          live.insert(client::object_name(o));
                          log.push_back("add " + client::object_name(o));
                        },
                        [this](const Json&, const Json& o) {
                          std::lock_guard l(mu);
                          log.push_back("update " + client::object_name(o));
                        },
                        [this](const Json& o) {
                          std::lock_guard l(mu);
                          live.erase(client::object_name(o));
                          log.push_back("delete " + client::object_name(o));
                        }};
  }
  std::set<std::string> names() {
    std::lock_guard l(mu);
    return live;
  }
};

TEST(Informer, KeepsTheStoreAndHandlersInStep) {
  auto s = start_server();
  auto c = client_for(*s);
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("a")).ok());
  InformerConfig cfg;
  cfg.resync_period = 0s;
  Informer inf(*c, client::kinds::deployment(), cfg, SystemClock::instance());
  Recorder rec;
  inf.add_handler(rec.handler());
  inf.start();
  ASSERT_TRUE(eventually([&] { return inf.has_synced(); }));
  Json b = *c->create(client::kinds::deployment(), deployment_json("b"));
  b["spec"]["replicas"] = 3;
  ASSERT_TRUE(c->update(client::kinds::deployment(), b).ok());
  ASSERT_TRUE(c->remove(client::kinds::deployment(), "default", "a").ok());
  ASSERT_TRUE(eventually([&] {
    auto o = inf.store().get("default/b");
    return o && (*o)["spec"]["replicas"] == 3 && !inf.store().get("default/a");
  }));
  // The informer updates its store, then calls the handlers: the handlers' view arrives a moment later.
  EXPECT_TRUE(eventually([&] { return rec.names() == std::set<std::string>{"b"}; }))
      << "handlers saw: " << ::testing::PrintToString(rec.names());
  // managedFields are not kept in memory
  EXPECT_FALSE((*inf.store().get("default/b"))["metadata"].contains("managedFields"));
  inf.stop();
}

TEST(Informer, LosesNoEventAcrossABrokenWatchAndAnExpiredVersion) {
  auto s = start_server();
  auto c = client_for(*s);
  for (const char* n : {"a", "b", "c"})
    ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json(n)).ok());
  InformerConfig cfg;
  cfg.resync_period = 0s;
  cfg.initial_backoff = 10ms;
  Informer inf(*c, client::kinds::deployment(), cfg, SystemClock::instance());
  Recorder rec;
  inf.add_handler(rec.handler());
  inf.start();
  ASSERT_TRUE(eventually([&] { return rec.names().size() == 3; }));
  // While the watch is down, b is deleted, d is created, and the history the watch needs expires.
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kOnly, Fault::Kind::kStatus, 503, -1, {}, 3});
  s->drop_watches();
  ASSERT_TRUE(c->remove(client::kinds::deployment(), "default", "b").ok());
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("d")).ok());
  s->compact();
  ASSERT_TRUE(eventually([&] {
    return rec.names() == std::set<std::string>{"a", "c", "d"};
  })) << rec.names().size();
  EXPECT_GE(inf.stats().relists, 2u);
  EXPECT_GE(inf.stats().errors, 1u);
  inf.stop();
}

TEST(Informer, BacksOffWhileTheApiServerIsDown) {
  auto s = start_server();
  client::RetryPolicy p;
  p.max_attempts = 1;
  auto c = client_for(*s, nullptr, p);
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kAny, Fault::Kind::kStatus, 500, -1, {}, -1});
  InformerConfig cfg;
  cfg.resync_period = 0s;
  cfg.initial_backoff = 20ms;
  cfg.max_backoff = 200ms;
  FakeClock clock;
  Informer inf(*c, client::kinds::deployment(), cfg, clock);
  const size_t before = s->request_count();
  auto attempts = [&] { return s->request_count() - before; };
  inf.start();
  ASSERT_TRUE(eventually([&] { return attempts() >= 1; }));
  // The informer waits on the clock alone. Once it is backing off, the clock is advanced a
  // millisecond at a time until it wakes, and the time that took is its wait: the backoff (20, 40, 80,
  // 160, then the 200 ms cap) times a jitter in [1, 1.5).
  const std::chrono::milliseconds backoffs[] = {20ms, 40ms, 80ms, 160ms, 200ms, 200ms};
  size_t seen = 1;
  for (const auto backoff : backoffs) {
    ASSERT_TRUE(eventually([&] { return inf.stats().backing_off; })) << "attempt " << seen;
    EXPECT_EQ(attempts(), seen) << "an attempt came without the clock moving";
    std::chrono::milliseconds waited(0);
    // It woke when it stops backing off, or when its next attempt arrives (a failure handled faster
    // than this loop looks would hide the first).
    while (inf.stats().backing_off && attempts() == seen && waited < 10 * backoff) {
      clock.advance(1ms);
      waited += 1ms;
      std::this_thread::sleep_for(1ms);  // the informer polls a fake clock every millisecond
    }
    ASSERT_TRUE(eventually([&] { return attempts() == seen + 1; }))
        << "after " << waited.count() << " ms: " << attempts() << " attempts, " << seen << " before";
    seen = attempts();
    EXPECT_GE(waited, backoff) << "retried before its backoff: a hot loop";
    // The jitter's top, plus a few steps while the informer's thread wakes up.
    EXPECT_LE(waited, backoff * 3 / 2 + 15ms)
        << "waited longer than the backoff allows (cap " << cfg.max_backoff.count() << " ms)";
  }
  EXPECT_FALSE(inf.has_synced());
  s->clear_faults();
  // The clock moves on (the informer may still be handling the last failure when it starts to).
  ASSERT_TRUE(eventually(
      [&] {
        clock.advance(10ms);
        return inf.has_synced();
      },
      5s));
  inf.stop();
}

TEST(Informer, ResyncRedeliversEveryObjectOnTheClock) {
  auto s = start_server();
  auto c = client_for(*s);
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("a")).ok());
  FakeClock clock;
  InformerConfig cfg;
  cfg.resync_period = 10min;
  Informer inf(*c, client::kinds::deployment(), cfg, clock);
  Recorder rec;
  inf.add_handler(rec.handler());
  inf.start();
  ASSERT_TRUE(eventually([&] { return inf.has_synced(); }));
  // The resync loop may not be waiting on the clock yet when the test first advances it (it would
  // then wait a whole period from the new time): advance a period on every poll until it fires.
  ASSERT_TRUE(eventually([&] {
    clock.advance(10min);
    std::lock_guard l(rec.mu);
    return std::find(rec.log.begin(), rec.log.end(), "update a") != rec.log.end();
  }));
  inf.stop();
}

TEST(InformerCache, AnswersReadsFromTheStores) {
  auto s = start_server();
  auto c = client_for(*s);
  Json d = deployment_json("a");
  d["metadata"]["labels"]["tier"] = "gpu";
  ASSERT_TRUE(c->create(client::kinds::deployment(), d).ok());
  ASSERT_TRUE(c->create(client::kinds::deployment(), deployment_json("b")).ok());
  InformerCache cache(*c, SystemClock::instance());
  InformerConfig cfg;
  cfg.resync_period = 0s;
  cache.add(client::kinds::deployment(), cfg);
  cache.start();
  ASSERT_TRUE(cache.wait_for_sync(5s));
  size_t before = s->request_count();
  auto got = cache.get(client::kinds::deployment(), "default", "a");
  ASSERT_TRUE(got.ok());
  client::ListOptions lo;
  lo.label_selector = "tier=gpu";
  auto l = cache.list(client::kinds::deployment(), "default", lo);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->items.size(), 1u);
  EXPECT_EQ(s->request_count(), before);  // no API traffic for cached reads
  EXPECT_TRUE(client::is_not_found(cache.get(client::kinds::deployment(), "default", "zzz").error()));
  EXPECT_TRUE(refused(cache.get(client::kinds::pod(), "default", "a"), "",
                      {"no informer caches pods"}));  // not cached
  cache.stop();
}

}  // namespace
}  // namespace infergate::op::cache

namespace infergate::op::cache {
namespace {

TEST(Informer, StopsPromptlyWhileWatching) {
  infergate::testing::FakeApiServerOptions o;
  o.bookmark_interval = std::chrono::seconds(30);  // a quiet stream: nothing would wake the reader
  auto s = op::testing::start_server(o);
  auto c = op::testing::client_for(*s);
  InformerConfig cfg;
  Informer inf(*c, client::kinds::deployment(), cfg, SystemClock::instance());
  inf.start();
  ASSERT_TRUE(op::testing::eventually([&] { return inf.has_synced() && s->open_watches() == 1; }));
  auto start = std::chrono::steady_clock::now();
  inf.stop();
  // Generous for a loaded machine; the failure this guards against is a 30 s wait for the next bookmark.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace infergate::op::cache
