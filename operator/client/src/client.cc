// Resource kinds, paging, optimistic-concurrency retries and error classification.
#include "infergate/operator/client/client.h"

#include "infergate/operator/api/inference_model.h"

namespace infergate::op::client {

std::string ResourceKind::path(std::string_view ns, std::string_view name, std::string_view sub) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + std::string(ns);
  p += "/" + plural;
  if (!name.empty()) p += "/" + std::string(name);
  if (!sub.empty()) p += "/" + std::string(sub);
  return p;
}

namespace kinds {
const ResourceKind& deployment() {
  static const ResourceKind k{"apps", "v1", "deployments", "Deployment", true};
  return k;
}
const ResourceKind& service() {
  static const ResourceKind k{"", "v1", "services", "Service", true};
  return k;
}
const ResourceKind& pod() {
  static const ResourceKind k{"", "v1", "pods", "Pod", true};
  return k;
}
const ResourceKind& job() {
  static const ResourceKind k{"batch", "v1", "jobs", "Job", true};
  return k;
}
const ResourceKind& pod_disruption_budget() {
  static const ResourceKind k{"policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true};
  return k;
}
const ResourceKind& secret() {
  static const ResourceKind k{"", "v1", "secrets", "Secret", true};
  return k;
}
const ResourceKind& event() {
  static const ResourceKind k{"", "v1", "events", "Event", true};
  return k;
}
const ResourceKind& lease() {
  static const ResourceKind k{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return k;
}
const ResourceKind& namespace_() {
  static const ResourceKind k{"", "v1", "namespaces", "Namespace", false};
  return k;
}
const ResourceKind& inference_model() {
  static const ResourceKind k{std::string(api::kGroup), std::string(api::kVersion), std::string(api::kPlural),
                              std::string(api::kKind), true};
  return k;
}
const ResourceKind& custom_resource_definition() {
  static const ResourceKind k{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                              "CustomResourceDefinition", false};
  return k;
}
const ResourceKind& token_review() {
  static const ResourceKind k{"authentication.k8s.io", "v1", "tokenreviews", "TokenReview", false};
  return k;
}
const ResourceKind& subject_access_review() {
  static const ResourceKind k{"authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
                              false};
  return k;
}
}  // namespace kinds

std::string_view to_string(WatchEventType t) {
  switch (t) {
    case WatchEventType::kAdded: return "ADDED";
    case WatchEventType::kModified: return "MODIFIED";
    case WatchEventType::kDeleted: return "DELETED";
    case WatchEventType::kBookmark: return "BOOKMARK";
    case WatchEventType::kError: return "ERROR";
  }
  return "?";
}

Result<ObjectList> list_all(Reader& reader, const ResourceKind& kind, std::string_view ns,
                            ListOptions options, int64_t page_size) {
  ObjectList all;
  options.limit = page_size;
  options.continue_token.clear();
  bool first = true;
  for (int pages = 0;; ++pages) {
    if (pages > 1'000'000)
      return internal_error("list " + kind.resource() + ": the server never stopped paging");
    auto page = reader.list(kind, ns, options);
    if (!page.ok()) return std::move(page).error();
    if (first) {
      all.resource_version = page->resource_version;
      first = false;
    }
    for (auto& item : page->items) all.items.push_back(std::move(item));
    if (page->continue_token.empty()) break;
    options.continue_token = page->continue_token;
  }
  return all;
}

Result<Json> update_with_retry(Client& client, const ResourceKind& kind, std::string_view ns,
                               std::string_view name, const std::function<Result<bool>(Json&)>& mutate,
                               bool status, int attempts) {
  for (int i = 0; i < attempts; ++i) {
    INFERGATE_ASSIGN_OR_RETURN(Json obj, client.get(kind, ns, name));
    INFERGATE_ASSIGN_OR_RETURN(bool changed, mutate(obj));
    if (!changed) return obj;
    auto written = status ? client.update_status(kind, obj) : client.update(kind, obj);
    if (written.ok()) return written;
    if (!is_conflict(written.error())) return written;
  }
  return Error(ErrorCode::kConflict,
               kind.resource() + " " + std::string(name) + ": still conflicting after " +
                   std::to_string(attempts) + " attempts",
               "Conflict");
}

bool is_not_found(const Error& e) { return e.code() == ErrorCode::kNotFound; }
bool is_conflict(const Error& e) { return e.code() == ErrorCode::kConflict; }
bool is_already_exists(const Error& e) { return e.code() == ErrorCode::kAlreadyExists; }
bool is_gone(const Error& e) { return e.detail("status") == "410"; }
bool is_retryable(const Error& e) {
  return e.code() == ErrorCode::kUnavailable || e.code() == ErrorCode::kDeadlineExceeded ||
         e.code() == ErrorCode::kResourceExhausted;
}

Error api_error(int http_status, std::string_view body, std::string_view what) {
  std::string reason, message;
  auto parsed = parse_json(body, "status");
  if (parsed.ok() && parsed->is_object() && parsed->value("kind", "") == "Status") {
    reason = parsed->value("reason", "");
    message = parsed->value("message", "");
  }
  if (message.empty()) {
    message = std::string(body.substr(0, 256));
    if (message.empty()) message = "HTTP " + std::to_string(http_status);
  }
  ErrorCode code;
  switch (http_status) {
    case 400: code = ErrorCode::kInvalidArgument; break;
    case 401:
    case 403: code = ErrorCode::kPermissionDenied; break;
    case 404: code = ErrorCode::kNotFound; break;
    case 409: code = reason == "AlreadyExists" ? ErrorCode::kAlreadyExists : ErrorCode::kConflict; break;
    case 410: code = ErrorCode::kFailedPrecondition; break;
    case 422: code = ErrorCode::kInvalidArgument; break;
    case 429: code = ErrorCode::kResourceExhausted; break;
    case 504: code = ErrorCode::kDeadlineExceeded; break;
    default: code = http_status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInternal; break;
  }
  if (reason.empty()) {
    switch (http_status) {
      case 404: reason = "NotFound"; break;
      case 409: reason = "Conflict"; break;
      case 410: reason = "Expired"; break;
      case 429: reason = "TooManyRequests"; break;
      default: reason = http_status >= 500 ? "InternalError" : "";
    }
  }
  Error e(code, std::string(what) + ": " + message, reason);
  e.with_detail("status", std::to_string(http_status));
  return e;
}

std::string object_name(const Json& o) {
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto n = m->find("name");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

std::string object_namespace(const Json& o) {
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto n = m->find("namespace");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

std::string object_uid(const Json& o) {
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto n = m->find("uid");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

std::string object_resource_version(const Json& o) {
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto n = m->find("resourceVersion");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

std::string object_key(const Json& o) {
  std::string ns = object_namespace(o);
  return ns.empty() ? object_name(o) : ns + "/" + object_name(o);
}

std::string object_label(const Json& o, std::string_view key) {
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto l = m->find("labels");
  if (l == m->end() || !l->is_object()) return "";
  auto v = l->find(std::string(key));
  return v != l->end() && v->is_string() ? v->get<std::string>() : "";
}

}  // namespace infergate::op::client
