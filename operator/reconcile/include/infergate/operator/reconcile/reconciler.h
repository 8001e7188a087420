// The reconcile contract (controller-runtime's pkg/reconcile, kube-rs' Action): a Reconciler brings
// one object's world towards its spec and says when it wants to run again. It must be idempotent:
// it may run any number of times for the same state, and running it on an unchanged world writes
// nothing. Errors are retried with per-key backoff by the manager.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::op::reconcile {

// Which object to reconcile.
struct Request {
  std::string namespace_;
  std::string name;
  // "ns/name" or "name".
  std::string key() const { return namespace_.empty() ? name : namespace_ + "/" + name; }
  static Request from_key(std::string_view key);
  bool operator==(const Request&) const = default;
};

// What to do after a successful reconcile.
class Action {
 public:
  // Nothing to do until something the reconciler watches changes.
  static Action await_change() { return Action(std::nullopt); }
  // Run again after `d` even if nothing changes (polling something that sends no events).
  static Action requeue_after(std::chrono::nanoseconds d) { return Action(d); }

  const std::optional<std::chrono::nanoseconds>& requeue() const { return requeue_; }
  // The sooner of two actions (await_change is "never").
  Action merge(const Action& other) const;
  bool operator==(const Action&) const = default;

 private:
  explicit Action(std::optional<std::chrono::nanoseconds> r) : requeue_(r) {}
  std::optional<std::chrono::nanoseconds> requeue_;
};

// The reason word of a reconcile that threw (see record_failure).
inline constexpr std::string_view kReconcileError = "ReconcileError";

class Reconciler {
 public:
  virtual ~Reconciler() = default;
  // Thread-safe for different requests; the manager never runs two reconciles of one key at once.
  virtual Result<Action> reconcile(const Request& request) = 0;
  // The last line: the manager calls this, after logging it, when reconcile threw instead of returning
  // (a bug of ours: outside data is refused with a condition before anything acts on it), with what the
  // exception said. It records the failure on the object where it can (a condition, one event) and
  // must not throw; the manager then retries that key alone, with backoff.
  virtual void record_failure(const Request& request, const std::string& what) {
    (void)request;
    (void)what;
  }
};

}  // namespace infergate::op::reconcile
