// Delegated authentication and authorisation of /metrics scrapes against the fake API server's
// TokenReview and SubjectAccessReview, on a fake clock: decisions, their cache, and what is not cached.
#include "infergate/operator/manager/kubernetes_authorizer.h"

#include <gtest/gtest.h>

#include "testing.h"

namespace infergate::op::manager {
namespace {

using namespace std::chrono_literals;
using infergate::testing::FakeApiServerOptions;
using infergate::testing::Fault;

constexpr const char* kReader = "system:serviceaccount:monitoring:prometheus";

class Authorizer : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions o;
    o.users = {{"reader-token", kReader}, {"other-token", "system:serviceaccount:monitoring:other"}};
    o.tokens = {"admin-token"};  // the operator's own client: a cluster administrator here
    server_ = op::testing::start_server(o);
    ASSERT_TRUE(server_);
    ASSERT_EQ(
        server_
            ->create("/apis/rbac.authorization.k8s.io/v1/clusterroles",
                     Json::parse(R"({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                 "metadata": {"name": "metrics-reader"},
                                 "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})"))
            .status,
        201);
    ASSERT_EQ(server_
                  ->create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                           Json::parse(
                               R"({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                 "metadata": {"name": "metrics-reader"},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": "metrics-reader"},
                                 "subjects": [{"kind": "ServiceAccount", "name": "prometheus",
                                               "namespace": "monitoring"}]})"))
                  .status,
              201);
    auto cfg = op::testing::config_for(*server_);
    cfg.token = client::TokenSource::fixed("admin-token");
    client::RetryPolicy once;
    once.max_attempts = 1;
    auto c = client::RestClient::create(cfg, once);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    client_ = std::move(*c);
    authorizer_ =
        std::make_unique<KubernetesAuthorizer>(*client_, clock_, KubernetesAuthorizerOptions{10s, 4});
  }
  size_t reviews() {
    size_t n = 0;
    for (const auto& r : server_->requests()) n += r.path.find("reviews") != std::string::npos;
    return n;
  }

  std::unique_ptr<infergate::testing::FakeApiServer> server_;
  std::unique_ptr<client::RestClient> client_;
  FakeClock clock_;
  std::unique_ptr<KubernetesAuthorizer> authorizer_;
};

TEST_F(Authorizer, AllowsATokenWhoseUserMayGetTheUrlAndCachesTheDecisionForItsTtl) {
  AccessDecision d = authorizer_->check("reader-token", "get", "/metrics");
  EXPECT_EQ(d.status, 200) << d.message;
  EXPECT_EQ(reviews(), 2u);  // one TokenReview, one SubjectAccessReview
  EXPECT_EQ(authorizer_->check("reader-token", "get", "/metrics").status, 200);
  EXPECT_EQ(reviews(), 2u) << "asked again within the TTL";
  clock_.advance(11s);
  EXPECT_EQ(authorizer_->check("reader-token", "get", "/metrics").status, 200);
  EXPECT_EQ(reviews(), 4u) << "asked again after the TTL";
}

TEST_F(Authorizer, RefusesAnUnknownTokenWith401AndAnUnboundUserWith403) {
  AccessDecision unknown = authorizer_->check("made-up", "get", "/metrics");
  EXPECT_EQ(unknown.status, 401);
  EXPECT_NE(unknown.message.find("not valid"), std::string::npos) << unknown.message;
  AccessDecision other = authorizer_->check("other-token", "get", "/metrics");
  EXPECT_EQ(other.status, 403);
  EXPECT_NE(other.message.find("system:serviceaccount:monitoring:other"), std::string::npos) << other.message;
  EXPECT_EQ(other.message.find("other-token"), std::string::npos) << "a token never appears in a message";
  // The same user on another path or verb is a decision of its own.
  EXPECT_EQ(authorizer_->check("reader-token", "get", "/debug").status, 403);
  EXPECT_EQ(authorizer_->check("reader-token", "post", "/metrics").status, 403);
}

TEST_F(Authorizer, AnApiServerThatCannotAnswerGivesA503ThatIsNotRemembered) {
  server_->add_fault(
      Fault{"POST", "/tokenreviews", "", Fault::Watch::kAny, Fault::Kind::kStatus, 503, -1, {}, 1});
  AccessDecision down = authorizer_->check("reader-token", "get", "/metrics");
  EXPECT_EQ(down.status, 503);
  EXPECT_EQ(authorizer_->check("reader-token", "get", "/metrics").status, 200) << "the 503 was not cached";
  server_->add_fault(
      Fault{"POST", "/subjectaccessreviews", "", Fault::Watch::kAny, Fault::Kind::kStatus, 500, -1, {}, 1});
  EXPECT_EQ(authorizer_->check("other-token", "get", "/metrics").status, 503);
}

TEST_F(Authorizer, KeepsAtMostItsMaximumOfDecisions) {
  // max_entries is 4: many distinct tokens never grow the cache past it (each one is asked for).
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(authorizer_->check("t" + std::to_string(i), "get", "/metrics").status, 401);
  const size_t before = reviews();
  EXPECT_EQ(authorizer_->check("t19", "get", "/metrics").status, 401);
  EXPECT_EQ(reviews(), before) << "the newest decision is kept";
  EXPECT_EQ(authorizer_->check("t0", "get", "/metrics").status, 401);
  EXPECT_EQ(reviews(), before + 1) << "the oldest was dropped";
}

TEST(TokenReviewUser, ReadsTheUserAndRefusesAnswersOfTheWrongShape) {
  auto u = token_review_user(Json::parse(
      R"({"status": {"authenticated": true, "user": {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}}}})"));
  ASSERT_TRUE(u.ok()) << u.error().to_string();
  EXPECT_EQ(u->username, "u");
  EXPECT_EQ(u->groups, Json::array({"g"}));
  auto denied = token_review_user(Json::parse(R"({"status": {"authenticated": false, "error": "expired"}})"));
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().reason(), "Unauthenticated");
  EXPECT_NE(denied.error().message().find("expired"), std::string::npos);
  for (const char* bad :
       {R"({})", R"({"status": {"authenticated": "yes"}})", R"({"status": {"authenticated": true}})",
        R"({"status": {"authenticated": true, "user": {"username": 7}}})",
        R"({"status": {"authenticated": true, "user": {"username": "u", "groups": [1]}}})"}) {
    auto r = token_review_user(Json::parse(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().reason(), "MalformedResponse") << bad;
  }
  auto path = token_review_user(
      Json::parse(R"({"status": {"authenticated": true, "user": {"username": "u", "groups": [1]}}})"));
  EXPECT_NE(path.error().message().find("status.user.groups[0]"), std::string::npos)
      << path.error().message();
}

}  // namespace
}  // namespace infergate::op::manager
