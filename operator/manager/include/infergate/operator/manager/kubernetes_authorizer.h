// KubernetesAuthorizer: delegated authentication and authorisation, as Kubernetes components (and
// controller-runtime's secure metrics filter) protect their /metrics: the bearer token is sent to the
// API server in a TokenReview; the user it names is checked with a SubjectAccessReview for the
// non-resource URL and verb ("get /metrics"). Both need the operator's ClusterRole to allow "create" on
// tokenreviews.authentication.k8s.io and subjectaccessreviews.authorization.k8s.io (the chart grants it).
//
// Guarantees: a token is never logged or kept in clear (the cache is keyed by its SHA-256); decisions
// (allowed, unauthenticated, forbidden) are cached for `ttl` so that a scrape every few seconds does
// not cost two API calls each; an API error is never cached and answers 503. Caveats: a revoked token
// or a removed binding is honoured at most `ttl` late. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "infergate/common/clock.h"
#include "infergate/operator/client/client.h"
#include "infergate/operator/manager/http_endpoints.h"

namespace infergate::op::manager {

struct KubernetesAuthorizerOptions {
  std::chrono::milliseconds ttl{10'000};  // client-go's delegated authn/authz caches use 10 s too
  size_t max_entries = 1024;              // the oldest decision is dropped beyond this
};

class KubernetesAuthorizer final : public RequestAuthorizer {
 public:
  KubernetesAuthorizer(client::Client& api, Clock& clock, KubernetesAuthorizerOptions options = {});

  AccessDecision check(std::string_view bearer_token, std::string_view verb, std::string_view path) override;

 private:
  AccessDecision ask(std::string_view bearer_token, std::string_view verb, std::string_view path);

  client::Client& api_;
  Clock& clock_;
  KubernetesAuthorizerOptions options_;
  struct Entry {
    AccessDecision decision;
    MonoTime expires;
    uint64_t added;  // insertion order: the oldest is dropped first
  };
  std::mutex mu_;
  uint64_t added_ = 0;
  std::map<std::string, Entry> cache_;  // sha256(token) + " " + verb + " " + path
};

// The user a TokenReview's answer authenticates (for the SubjectAccessReview), or the reason it does
// not: 401 with the API server's error. Exposed for tests.
struct ReviewedUser {
  std::string username;
  std::string uid;
  Json groups = Json::array();
  Json extra = Json::object();
};
Result<ReviewedUser> token_review_user(const Json& review);

}  // namespace infergate::op::manager
