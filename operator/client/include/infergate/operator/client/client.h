// The Kubernetes API, as infergate's operator uses it: small Reader / Writer / Client interfaces over
// JSON objects (kube-rs' dynamic objects, client-go's dynamic client). RestClient is the HTTP
// implementation; the informer cache implements Reader. Nothing here knows the HTTP transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::op::client {

// A resource type: where it lives in the API.
struct ResourceKind {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string kind;
  bool namespaced = true;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // "/apis/apps/v1/namespaces/ns/deployments[/name[/sub]]"; ns "" lists across namespaces.
  std::string path(std::string_view ns = {}, std::string_view name = {}, std::string_view sub = {}) const;
  // "deployments.apps" (what kubectl and RBAC call it).
  std::string resource() const { return group.empty() ? plural : plural + "." + group; }
  bool operator==(const ResourceKind& o) const { return group == o.group && plural == o.plural; }
};

namespace kinds {
const ResourceKind& deployment();
const ResourceKind& service();
const ResourceKind& pod();
const ResourceKind& job();
const ResourceKind& pod_disruption_budget();
const ResourceKind& secret();
const ResourceKind& event();
const ResourceKind& lease();
const ResourceKind& namespace_();
const ResourceKind& inference_model();
const ResourceKind& custom_resource_definition();
const ResourceKind& token_review();           // authentication.k8s.io/v1, created only (never stored)
const ResourceKind& subject_access_review();  // authorization.k8s.io/v1, created only (never stored)
}  // namespace kinds

struct GetOptions {
  bool metadata_only = false;  // ask for PartialObjectMetadata (never read a Secret's data)
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0: the server's default (everything)
  std::string continue_token;
  std::string resource_version;
};

struct ObjectList {
  std::vector<Json> items;
  std::string resource_version;
  std::string continue_token;
};

struct WatchOptions {
  std::string resource_version;  // "" or "0": the server starts with synthetic ADDED events
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  std::chrono::seconds timeout{300};  // the server ends the stream cleanly after this
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view to_string(WatchEventType t);

struct WatchEvent {
  WatchEventType type;
  Json object;  // the object; for kError, a metav1.Status (code 410 means "re-list")
};

// One open watch stream. next() blocks for the next event; nullopt means the server ended the
// stream cleanly (re-watch from the last resourceVersion). An error means the connection broke.
// cancel() may be called from another thread and makes next() return promptly.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  virtual Result<std::optional<WatchEvent>> next() = 0;
  virtual void cancel() = 0;
};

enum class PatchType { kMerge, kApply, kJsonPatch };

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take ownership of conflicting fields
  std::string subresource;    // "status" or ""
};

struct DeleteOptions {
  std::string precondition_uid;  // delete only this incarnation of the name
  std::string propagation_policy = "Background";
};

// Reads. Thread-safe. Errors: NotFound (reason "NotFound"), PermissionDenied, Unavailable, ...
class Reader {
 public:
  virtual ~Reader() = default;
  virtual Result<Json> get(const ResourceKind& kind, std::string_view ns, std::string_view name,
                           const GetOptions& options = {}) = 0;
  // One page; see list_all for every page.
  virtual Result<ObjectList> list(const ResourceKind& kind, std::string_view ns,
                                  const ListOptions& options) = 0;
};

// Writes. Thread-safe. Each returns the object as the server stored it.
// Errors carry the API's reason word: Conflict (stale resourceVersion, code kConflict),
// AlreadyExists, NotFound, Invalid, Forbidden, TooManyRequests, Expired.
class Writer {
 public:
  virtual ~Writer() = default;
  virtual Result<Json> create(const ResourceKind& kind, const Json& object) = 0;
  // PUT; with metadata.resourceVersion set, a stale object is refused with Conflict.
  virtual Result<Json> update(const ResourceKind& kind, const Json& object) = 0;
  virtual Result<Json> update_status(const ResourceKind& kind, const Json& object) = 0;
  virtual Result<Json> patch(const ResourceKind& kind, std::string_view ns, std::string_view name,
                             PatchType type, const Json& patch, const PatchOptions& options = {}) = 0;
  virtual Status remove(const ResourceKind& kind, std::string_view ns, std::string_view name,
                        const DeleteOptions& options = {}) = 0;
};

class Client : public Reader, public Writer {
 public:
  virtual Result<std::unique_ptr<WatchStream>> watch(const ResourceKind& kind, std::string_view ns,
                                                     const WatchOptions& options) = 0;
};

// Every page of a list (limit/continue), with the resourceVersion of the first page (the version to
// watch from). A 410 Gone on a continue token (the snapshot expired) is returned as an error.
Result<ObjectList> list_all(Reader& reader, const ResourceKind& kind, std::string_view ns,
                            ListOptions options, int64_t page_size = 500);

// Read, modify, write with optimistic concurrency: on Conflict, re-read and apply `mutate` again
// (up to `attempts` times). `mutate` returns false to leave the object unchanged (no write).
Result<Json> update_with_retry(Client& client, const ResourceKind& kind, std::string_view ns,
                               std::string_view name, const std::function<Result<bool>(Json&)>& mutate,
                               bool status = false, int attempts = 5);

// Classification of API errors.
bool is_not_found(const Error& e);
bool is_conflict(const Error& e);        // 409 Conflict (stale resourceVersion)
bool is_already_exists(const Error& e);  // 409 AlreadyExists
bool is_gone(const Error& e);            // 410 Expired / Gone
bool is_retryable(const Error& e);       // 429, 5xx, timeouts, connection failures

// An Error for an HTTP status and its body (a metav1.Status when the API server sent one).
Error api_error(int http_status, std::string_view body, std::string_view what);

// "metadata.namespace/metadata.name" (or just the name).
std::string object_key(const Json& object);
std::string object_name(const Json& object);
std::string object_namespace(const Json& object);
std::string object_uid(const Json& object);
std::string object_resource_version(const Json& object);
// The value of a label ("" when absent).
std::string object_label(const Json& object, std::string_view key);

}  // namespace infergate::op::client
