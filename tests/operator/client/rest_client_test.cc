// RestClient against the fake API server: CRUD, conflicts, paging, watches, retries, timeouts, TLS.
#include "infergate/operator/client/rest_client.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "fixtures/tls_certs.h"
#include "testing.h"

namespace infergate::op::client {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;
using infergate::testing::Fault;
using op::testing::client_for;
using op::testing::deployment_json;
using op::testing::RecordingClock;
using op::testing::start_server;

TEST(RestClient, CreatesGetsUpdatesAndDeletes) {
  auto s = start_server();
  auto c = client_for(*s);
  auto created = c->create(kinds::deployment(), deployment_json("web"));
  ASSERT_TRUE(created.ok()) << created.error().to_string();
  auto got = c->get(kinds::deployment(), "default", "web");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(object_uid(*got), object_uid(*created));
  (*got)["spec"]["replicas"] = 3;
  auto updated = c->update(kinds::deployment(), *got);
  ASSERT_TRUE(updated.ok()) << updated.error().to_string();
  EXPECT_EQ((*updated)["spec"]["replicas"], 3);
  ASSERT_TRUE(c->remove(kinds::deployment(), "default", "web").ok());
  auto gone = c->get(kinds::deployment(), "default", "web");
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(is_not_found(gone.error()));
  EXPECT_EQ(gone.error().reason(), "NotFound");
}

TEST(RestClient, StaleUpdateIsAConflictAndRetryResolvesIt) {
  auto s = start_server();
  auto c = client_for(*s);
  Json d = *c->create(kinds::deployment(), deployment_json("web"));
  Json newer = d;
  newer["spec"]["replicas"] = 2;
  ASSERT_TRUE(c->update(kinds::deployment(), newer).ok());
  auto stale = c->update(kinds::deployment(), d);
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(is_conflict(stale.error()));
  EXPECT_EQ(stale.error().reason(), "Conflict");
  int calls = 0;
  auto merged = update_with_retry(*c, kinds::deployment(), "default", "web", [&](Json& obj) -> Result<bool> {
    if (++calls == 1) {  // someone else writes between our read and our write
      Json other =
          *s->get("/apis/apps/v1/namespaces/default/deployments/web").body.get_ptr<Json::object_t*>();
      other["metadata"]["labels"]["touched"] = "yes";
      s->update("/apis/apps/v1/namespaces/default/deployments/web", other);
    }
    obj["metadata"]["annotations"]["mine"] = "yes";
    return true;
  });
  ASSERT_TRUE(merged.ok()) << merged.error().to_string();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ((*merged)["metadata"]["labels"]["touched"], "yes");  // no lost update
  EXPECT_EQ((*merged)["metadata"]["annotations"]["mine"], "yes");
}

TEST(RestClient, CreateOfAnExistingNameIsAlreadyExists) {
  auto s = start_server();
  auto c = client_for(*s);
  ASSERT_TRUE(c->create(kinds::deployment(), deployment_json("web")).ok());
  auto again = c->create(kinds::deployment(), deployment_json("web"));
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(is_already_exists(again.error()));
}

TEST(RestClient, ListAllFollowsContinueTokens) {
  auto s = start_server();
  auto c = client_for(*s);
  for (int i = 0; i < 7; ++i)
    ASSERT_TRUE(c->create(kinds::deployment(), deployment_json("d" + std::to_string(i))).ok());
  size_t before = s->request_count();
  auto all = list_all(*c, kinds::deployment(), "default", {}, 3);
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  EXPECT_EQ(all->items.size(), 7u);
  EXPECT_EQ(s->request_count() - before, 3u);  // pages of 3, 3, 1
  EXPECT_FALSE(all->resource_version.empty());
}

TEST(RestClient, ListFiltersByLabelSelector) {
  auto s = start_server();
  auto c = client_for(*s);
  Json a = deployment_json("a"), b = deployment_json("b");
  b["metadata"]["labels"]["tier"] = "gpu";
  ASSERT_TRUE(c->create(kinds::deployment(), a).ok());
  ASSERT_TRUE(c->create(kinds::deployment(), b).ok());
  ListOptions o;
  o.label_selector = "app=web,tier in (gpu)";
  auto l = c->list(kinds::deployment(), "default", o);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->items.size(), 1u);
  EXPECT_EQ(object_name(l->items[0]), "b");
}

TEST(RestClient, ServerSideApplyCreatesThenUpdates) {
  auto s = start_server();
  auto c = client_for(*s);
  PatchOptions o{"infergate-operator", true, ""};
  Json cfg = deployment_json("web");
  auto first = c->patch(kinds::deployment(), "default", "web", PatchType::kApply, cfg, o);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  cfg["spec"]["replicas"] = 4;
  auto second = c->patch(kinds::deployment(), "default", "web", PatchType::kApply, cfg, o);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["spec"]["replicas"], 4);
  auto merge = c->patch(kinds::deployment(), "default", "web", PatchType::kMerge,
                        {{"metadata", {{"annotations", {{"x", "1"}}}}}});
  ASSERT_TRUE(merge.ok());
  EXPECT_EQ((*merge)["metadata"]["annotations"]["x"], "1");
  EXPECT_FALSE(
      c->patch(kinds::deployment(), "default", "web", PatchType::kApply, cfg, {}).ok());  // no manager
}

TEST(RestClient, WatchDeliversEventsInOrderWithBookmarks) {
  infergate::testing::FakeApiServerOptions o;
  o.bookmark_interval = 50ms;
  auto s = start_server(o);
  auto c = client_for(*s);
  Json d = *c->create(kinds::deployment(), deployment_json("web"));
  WatchOptions wo;
  wo.resource_version = object_resource_version(d);
  auto w = c->watch(kinds::deployment(), "default", wo);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  d["spec"]["replicas"] = 2;
  ASSERT_TRUE(c->update(kinds::deployment(), d).ok());
  ASSERT_TRUE(c->remove(kinds::deployment(), "default", "web").ok());
  std::vector<WatchEventType> types;
  bool bookmark = false;
  while (types.size() < 2 || !bookmark) {
    auto ev = (*w)->next();
    ASSERT_TRUE(ev.ok()) << ev.error().to_string();
    ASSERT_TRUE(ev->has_value());
    if ((*ev)->type == WatchEventType::kBookmark) {
      bookmark = true;
      EXPECT_FALSE(object_resource_version((*ev)->object).empty());
    } else {
      types.push_back((*ev)->type);
    }
  }
  EXPECT_EQ(types, (std::vector<WatchEventType>{WatchEventType::kModified, WatchEventType::kDeleted}));
}

TEST(RestClient, WatchFromAnExpiredVersionGetsA410ErrorEvent) {
  auto s = start_server();
  auto c = client_for(*s);
  Json d = *c->create(kinds::deployment(), deployment_json("web"));
  ASSERT_TRUE(c->create(kinds::deployment(), deployment_json("other")).ok());
  s->compact();
  WatchOptions wo;
  wo.resource_version = object_resource_version(d);
  auto w = c->watch(kinds::deployment(), "default", wo);
  ASSERT_TRUE(w.ok());
  auto ev = (*w)->next();
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->type, WatchEventType::kError);
  EXPECT_EQ((*ev)->object["code"], 410);
}

TEST(RestClient, WatchEndsCleanlyAtItsTimeoutAndBreaksWhenDropped) {
  auto s = start_server();
  auto c = client_for(*s);
  WatchOptions wo;
  wo.timeout = 1s;
  wo.allow_bookmarks = false;
  auto w = c->watch(kinds::deployment(), "default", wo);
  ASSERT_TRUE(w.ok());
  auto end = (*w)->next();
  ASSERT_TRUE(end.ok()) << end.error().to_string();
  EXPECT_FALSE(end->has_value());  // a clean end
  auto w2 = c->watch(kinds::deployment(), "default", {});
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE(op::testing::eventually([&] { return s->open_watches() == 1; }));
  s->drop_watches();
  auto broken = (*w2)->next();
  EXPECT_TRUE(refused(broken, "ConnectionFailed", {"watch deployments.apps default"}));
}

TEST(RestClient, WatchCancelReturnsPromptly) {
  auto s = start_server();
  auto c = client_for(*s);
  auto w = c->watch(kinds::deployment(), "default", {});
  ASSERT_TRUE(w.ok());
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    (*w)->cancel();
  });
  auto start = std::chrono::steady_clock::now();
  auto ev = (*w)->next();
  t.join();
  EXPECT_FALSE(ev.ok());
  EXPECT_EQ(ev.error().code(), ErrorCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(RestClient, HonoursRetryAfterOn429) {
  auto s = start_server();
  RecordingClock clock;
  auto c = client_for(*s, &clock);
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kNever, Fault::Kind::kStatus, 429, 7, {}, 2});
  auto l = c->list(kinds::deployment(), "default", {});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  auto sleeps = clock.sleeps();
  ASSERT_EQ(sleeps.size(), 2u);
  EXPECT_EQ(sleeps[0], 7s);
  EXPECT_EQ(sleeps[1], 7s);
}

TEST(RestClient, BacksOffWithJitterOn5xxAndGivesUp) {
  auto s = start_server();
  RecordingClock clock;
  RetryPolicy p;
  p.max_attempts = 4;
  auto c = client_for(*s, &clock, p);
  s->add_fault(Fault{"GET", "", "", Fault::Watch::kNever, Fault::Kind::kStatus, 503, -1, {}, -1});
  auto l = c->list(kinds::deployment(), "default", {});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), ErrorCode::kUnavailable);
  auto sleeps = clock.sleeps();
  ASSERT_EQ(sleeps.size(), 3u);  // 4 attempts, 3 waits, growing
  EXPECT_LT(sleeps[0], sleeps[2]);
  s->clear_faults();
  EXPECT_TRUE(c->list(kinds::deployment(), "default", {}).ok());
}

TEST(RestClient, DoesNotRetryClientErrors) {
  auto s = start_server();
  RecordingClock clock;
  auto c = client_for(*s, &clock);
  EXPECT_TRUE(refused(c->get(kinds::deployment(), "default", "missing"), "NotFound", {"default/missing"}));
  EXPECT_TRUE(clock.sleeps().empty());
}

TEST(RestClient, RetriesADroppedConnection) {
  auto s = start_server();
  RecordingClock clock;
  auto c = client_for(*s, &clock);
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kNever, Fault::Kind::kDrop, 0, -1, {}, 1});
  auto l = c->list(kinds::deployment(), "default", {});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(clock.sleeps().size(), 1u);
}

TEST(RestClient, EveryRequestHasATimeout) {
  auto s = start_server();
  RestConfig cfg = op::testing::config_for(*s);
  cfg.timeout = 300ms;
  RetryPolicy p;
  p.max_attempts = 1;
  auto c = RestClient::create(cfg, p);
  ASSERT_TRUE(c.ok());
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kNever, Fault::Kind::kDelay, 0, -1, 2s, 1});
  auto start = std::chrono::steady_clock::now();
  auto l = (*c)->list(kinds::deployment(), "default", {});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), ErrorCode::kDeadlineExceeded) << l.error().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1900ms);
}

TEST(RestClient, SlowTrickledResponsesStillArrive) {
  auto s = start_server();
  auto c = client_for(*s);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(c->create(kinds::deployment(), deployment_json("d" + std::to_string(i))).ok());
  s->add_fault(Fault{"GET", "/deployments", "", Fault::Watch::kNever, Fault::Kind::kTrickle, 0, -1, 2ms, 1});
  auto l = c->list(kinds::deployment(), "default", {});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->items.size(), 3u);
}

TEST(RestClient, SendsTheBearerTokenAndReReadsARotatedFile) {
  infergate::testing::FakeApiServerOptions o;
  o.tokens = {"first", "second"};
  auto s = start_server(o);
  auto dir = TempDir::create("token");
  ASSERT_TRUE(dir.ok());
  auto token_file = dir->path() / "token";
  ASSERT_TRUE(write_file_atomic(token_file, "first\n").ok());
  RestConfig cfg = op::testing::config_for(*s);
  cfg.token = TokenSource::file(token_file);
  auto c = RestClient::create(cfg);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->list(kinds::deployment(), "default", {}).ok());
  ASSERT_TRUE(write_file_atomic(token_file, "second-but-longer\n").ok());
  auto denied = (*c)->list(kinds::deployment(), "default", {});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().code(), ErrorCode::kPermissionDenied);
  ASSERT_TRUE(write_file_atomic(token_file, "second").ok());
  EXPECT_TRUE((*c)->list(kinds::deployment(), "default", {}).ok());
}

TEST(RestClient, SpeaksTlsWithACaBundleAndAClientCertificate) {
  auto tls = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok()) << tls.error().to_string();
  infergate::testing::FakeApiServerOptions o;
  o.tls = infergate::testing::TlsOptions{tls->server_cert_pem, tls->server_key_pem, tls->ca_pem};
  o.tokens = {"unused"};  // authentication by client certificate
  auto s = start_server(o);
  ASSERT_EQ(s->url().rfind("https://", 0), 0u);
  RestConfig cfg = op::testing::config_for(*s);
  cfg.ca_pem = tls->ca_pem;
  cfg.client_cert_pem = tls->client_cert_pem;
  cfg.client_key_pem = tls->client_key_pem;
  cfg.timeout = 5s;
  auto c = RestClient::create(cfg);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  auto l = (*c)->list(kinds::deployment(), "default", {});
  EXPECT_TRUE(l.ok()) << l.error().to_string();
}

TEST(RestClient, RefusesAServerItCannotVerify) {
  auto tls = infergate::testing::make_tls_material();
  auto other = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok() && other.ok());
  infergate::testing::FakeApiServerOptions o;
  o.tls = infergate::testing::TlsOptions{tls->server_cert_pem, tls->server_key_pem, ""};
  auto s = start_server(o);
  RestConfig cfg = op::testing::config_for(*s);
  cfg.ca_pem = other->ca_pem;  // the wrong CA
  cfg.timeout = 5s;
  RetryPolicy p;
  p.max_attempts = 1;
  auto c = RestClient::create(cfg, p);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(
      refused((*c)->list(kinds::deployment(), "default", {}), "ConnectionFailed", {"list deployments.apps"}));
  cfg.ca_pem.clear();
  cfg.insecure_skip_tls_verify = true;  // only when asked for
  auto insecure = RestClient::create(cfg, p);
  ASSERT_TRUE(insecure.ok());
  EXPECT_TRUE((*insecure)->list(kinds::deployment(), "default", {}).ok());
}

TEST(RestClient, RefusesMalformedPemUpFront) {
  RestConfig cfg;
  cfg.server = "https://127.0.0.1:1";
  cfg.ca_pem = "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n";
  auto c = RestClient::create(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("certificate authority"), std::string::npos);
}

TEST(Backoff, GrowsExponentiallyWithinTheCapAndJitter) {
  RetryPolicy p;
  p.initial_backoff = 100ms;
  p.max_backoff = 1000ms;
  p.jitter = 0.5;
  std::mt19937_64 rng(42);
  for (int attempt = 1; attempt <= 8; ++attempt) {
    auto d = backoff_delay(p, attempt, rng);
    auto base = std::min<int64_t>(100LL << (attempt - 1), 1000);
    EXPECT_GE(d.count(), base) << attempt;
    EXPECT_LE(d.count(), base * 3 / 2) << attempt;
  }
}

}  // namespace
}  // namespace infergate::op::client
