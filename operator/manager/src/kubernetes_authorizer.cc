// TokenReview, then SubjectAccessReview, with a short cache of the decisions.
#include "infergate/operator/manager/kubernetes_authorizer.h"

#include "infergate/common/log.h"
#include "infergate/common/sha256.h"

namespace infergate::op::manager {
namespace {

// Every field of the answers is read typed; an answer of the wrong shape is the API server's fault
// (503), never a reason to let a request through.
Error malformed(std::string_view what, const Error& e) {
  return Error(ErrorCode::kDataLoss, std::string(what) + ": " + e.message(), "MalformedResponse");
}

std::string cache_key(std::string_view token, std::string_view verb, std::string_view path) {
  auto d = sha256(token);
  return (d.ok() ? d->hex() : std::string("?")) + " " + std::string(verb) + " " + std::string(path);
}

}  // namespace

Result<ReviewedUser> token_review_user(const Json& review) {
  const Json* status = nullptr;
  if (auto s = json_object(review, "status", ""); s.ok()) {
    status = *s;
  } else {
    return malformed("TokenReview", s.error());
  }
  auto authenticated = json_bool_or(*status, "authenticated", false, "status");
  if (!authenticated.ok()) return malformed("TokenReview", authenticated.error());
  if (!*authenticated) {
    auto why = json_string_or(*status, "error", "", "status");
    return Error(ErrorCode::kPermissionDenied,
                 why.ok() && !why->empty() ? "the token is not valid: " + *why : "the token is not valid",
                 "Unauthenticated");
  }
  auto user = json_object(*status, "user", "status");
  if (!user.ok()) return malformed("TokenReview", user.error());
  ReviewedUser out;
  auto name = json_string(**user, "username", "status.user");
  if (!name.ok()) return malformed("TokenReview", name.error());
  out.username = *name;
  auto uid = json_string_or(**user, "uid", "", "status.user");
  if (!uid.ok()) return malformed("TokenReview", uid.error());
  out.uid = *uid;
  if ((*user)->contains("groups")) {
    auto groups = json_array(**user, "groups", "status.user");
    if (!groups.ok()) return malformed("TokenReview", groups.error());
    for (size_t i = 0; i < (*groups)->size(); ++i) {
      if (!(**groups)[i].is_string()) {
        return Error(ErrorCode::kDataLoss,
                     "TokenReview: status.user.groups[" + std::to_string(i) + "]: expected a string",
                     "MalformedResponse");
      }
    }
    out.groups = **groups;
  }
  if ((*user)->contains("extra")) {
    auto extra = json_object(**user, "extra", "status.user");
    if (!extra.ok()) return malformed("TokenReview", extra.error());
    out.extra = **extra;
  }
  return out;
}

KubernetesAuthorizer::KubernetesAuthorizer(client::Client& api, Clock& clock,
                                           KubernetesAuthorizerOptions options)
    : api_(api), clock_(clock), options_(options) {}

AccessDecision KubernetesAuthorizer::check(std::string_view token, std::string_view verb,
                                           std::string_view path) {
  const std::string key = cache_key(token, verb, path);
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && clock_.mono_now() < it->second.expires) return it->second.decision;
  }
  AccessDecision d = ask(token, verb, path);
  if (d.status == 503) return d;  // the API server's trouble is not an answer to remember
  std::lock_guard lock(mu_);
  const MonoTime now = clock_.mono_now();
  if (cache_.size() >= options_.max_entries) {
    for (auto it = cache_.begin(); it != cache_.end();)
      it = it->second.expires <= now ? cache_.erase(it) : std::next(it);
    while (!cache_.empty() && cache_.size() >= options_.max_entries) {
      auto oldest = cache_.begin();
      for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->second.added < oldest->second.added) oldest = it;
      cache_.erase(oldest);
    }
  }
  cache_[key] = Entry{d, now + options_.ttl, ++added_};
  return d;
}

AccessDecision KubernetesAuthorizer::ask(std::string_view token, std::string_view verb,
                                         std::string_view path) {
  Json review = {{"apiVersion", "authentication.k8s.io/v1"},
                 {"kind", "TokenReview"},
                 {"metadata", Json::object()},
                 {"spec", {{"token", std::string(token)}}}};
  auto reviewed = api_.create(client::kinds::token_review(), review);
  if (!reviewed.ok()) {
    log::warn("cannot review a bearer token", {{"error", reviewed.error().to_string()}});
    return {503, "cannot authenticate the request now: " + reviewed.error().message()};
  }
  auto user = token_review_user(*reviewed);
  if (!user.ok()) {
    if (user.error().reason() == "Unauthenticated") return {401, user.error().message()};
    log::warn("a TokenReview answer of the wrong shape", {{"error", user.error().to_string()}});
    return {503, user.error().message()};
  }
  Json spec = {{"user", user->username},
               {"groups", user->groups},
               {"nonResourceAttributes", {{"path", std::string(path)}, {"verb", std::string(verb)}}}};
  if (!user->uid.empty()) spec["uid"] = user->uid;
  if (!user->extra.empty()) spec["extra"] = user->extra;
  Json access = {{"apiVersion", "authorization.k8s.io/v1"},
                 {"kind", "SubjectAccessReview"},
                 {"metadata", Json::object()},
                 {"spec", spec}};
  auto answered = api_.create(client::kinds::subject_access_review(), access);
  if (!answered.ok()) {
    log::warn("cannot review an access", {{"user", user->username}, {"error", answered.error().to_string()}});
    return {503, "cannot authorise the request now: " + answered.error().message()};
  }
  auto status = json_object(*answered, "status", "");
  auto allowed =
      status.ok() ? json_bool_or(**status, "allowed", false, "status") : Result<bool>(status.error());
  if (!allowed.ok()) return {503, malformed("SubjectAccessReview", allowed.error()).message()};
  if (*allowed)
    return {200, "user " + user->username + " may " + std::string(verb) + " " + std::string(path)};
  auto reason = json_string_or(**status, "reason", "", "status");
  std::string message =
      "user \"" + user->username + "\" cannot " + std::string(verb) + " " + std::string(path);
  if (reason.ok() && !reason->empty()) message += ": " + *reason;
  return {403, message};
}

}  // namespace infergate::op::manager
