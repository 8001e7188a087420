// The operator's endpoints on the project's HTTP server: routes and methods, plain probes, and a
// protected endpoint that answers only what its authorizer allows, over TLS.
#include "infergate/operator/manager/http_endpoints.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <mutex>

#include "fixtures/tls_certs.h"
#include "infergate/http/client.h"

namespace infergate::op::manager {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;

// Allows "good", forbids "bad", cannot tell for "down"; records what it was asked.
class ScriptedAuthorizer final : public RequestAuthorizer {
 public:
  AccessDecision check(std::string_view token, std::string_view verb, std::string_view path) override {
    std::lock_guard lock(mu);
    asked.push_back(std::string(verb) + " " + std::string(path));
    if (token == "good") return {200, "ok"};
    if (token == "bad") return {403, "user \"bad\" cannot get /metrics"};
    if (token == "down") return {503, "the API server did not answer"};
    return {401, "the token is not valid"};
  }
  std::mutex mu;
  std::vector<std::string> asked;
};

http::ClientResponse get(const std::string& url, const std::string& token = "", const std::string& ca = "",
                         const std::string& method = "GET") {
  http::ClientRequest r;
  r.method = method;
  r.timeout = 10s;
  if (!token.empty()) r.headers = {{"Authorization", "Bearer " + token}};
  auto got = http::fetch(url, r, http::ClientTls{ca, "", "", false});
  EXPECT_TRUE(got.ok()) << got.error().to_string();
  return got.ok() ? *got : http::ClientResponse{};
}

TEST(HttpEndpoints, ServesProbesWithoutAuthenticationAndRefusesOtherMethodsAndPaths) {
  auto e = HttpEndpoints::start({"127.0.0.1:0", std::nullopt, nullptr},
                                {{"/healthz", [] {
                                    return HttpAnswer{200, "text/plain", "ok\n"};
                                  }}});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  const std::string base = "http://127.0.0.1:" + std::to_string((*e)->port());
  auto ok = get(base + "/healthz");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "ok\n");
  EXPECT_EQ(ok.header("cache-control"), "no-cache");
  EXPECT_EQ(get(base + "/nope").status, 404);
  auto post = get(base + "/healthz", "", "", "POST");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("allow"), "GET, HEAD");
  EXPECT_EQ(get(base + "/healthz", "", "", "HEAD").body, "");
}

TEST(HttpEndpoints, AProtectedEndpointAnswersOnlyWhatItsAuthorizerAllowsOverTls) {
  auto tls = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok());
  ScriptedAuthorizer auth;
  auto e = HttpEndpoints::start(
      {"127.0.0.1:0", http::TlsOptions{tls->server_cert_pem, tls->server_key_pem, "", false}, &auth},
      {{"/metrics", [] {
          return HttpAnswer{200, "text/plain", "infergate_up 1\n"};
        }}});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_TRUE((*e)->tls());
  const std::string url = "https://127.0.0.1:" + std::to_string((*e)->port()) + "/metrics";
  auto none = get(url, "", tls->ca_pem);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.header("www-authenticate"), "Bearer");
  EXPECT_EQ(none.body.find("infergate_up"), std::string::npos);
  EXPECT_EQ(get(url, "unknown", tls->ca_pem).status, 401);
  auto bad = get(url, "bad", tls->ca_pem);
  EXPECT_EQ(bad.status, 403);
  EXPECT_NE(bad.body.find("cannot get /metrics"), std::string::npos) << bad.body;
  auto down = get(url, "down", tls->ca_pem);
  EXPECT_EQ(down.status, 503);
  EXPECT_FALSE(down.header("retry-after").empty());
  auto good = get(url, "good", tls->ca_pem);
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.body, "infergate_up 1\n");
  std::lock_guard lock(auth.mu);
  EXPECT_EQ(auth.asked.back(), "get /metrics");
  EXPECT_EQ(auth.asked.size(), 4u) << "no token: refused without asking";
}

TEST(HttpEndpoints, RefusesBadBindAddressesNamingThem) {
  auto bad = HttpEndpoints::start({"nonsense", std::nullopt, nullptr}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("nonsense"), std::string::npos);
  auto disabled = HttpEndpoints::start({"0", std::nullopt, nullptr}, {});
  ASSERT_TRUE(disabled.ok());
  EXPECT_EQ(*disabled, nullptr);
  auto hp = parse_bind_address(":8443");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->first, "0.0.0.0");
  EXPECT_EQ(hp->second, 8443);
  EXPECT_TRUE(refused(parse_bind_address("h:99999"), "", {"0 to 65535"}));
}

}  // namespace
}  // namespace infergate::op::manager
