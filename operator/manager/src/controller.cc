// Workers around a reconciler.
#include "infergate/operator/manager/controller.h"

#include "infergate/common/log.h"

namespace infergate::op::manager {

Controller::Controller(reconcile::Reconciler& reconciler, Clock& clock, ControllerOptions options,
                       ControllerObserver* observer)
    : reconciler_(reconciler),
      clock_(clock),
      options_(std::move(options)),
      observer_(observer),
      queue_(clock,
             std::make_unique<workqueue::ExponentialRateLimiter>(options_.retry_base, options_.retry_max),
             observer ? &observer->queue_observer(options_.name) : nullptr) {}

Controller::~Controller() { stop(); }

namespace {

// Runs one reconcile. An exception escaping it (it never should) becomes an error with reason
// ReconcileError, logged with the key and recorded on the object by the reconciler, so that one
// object's bug costs that object a retry with backoff, never the process or another object's turn.
Result<reconcile::Action> reconcile_guarded(reconcile::Reconciler& reconciler, const std::string& controller,
                                            const std::string& key) {
  const reconcile::Request req = reconcile::Request::from_key(key);
  std::string what;
  try {
    return reconciler.reconcile(req);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  log::error("reconcile threw; the object is retried with backoff",
             {{"controller", controller}, {"model", key}, {"error", what}});
  try {
    reconciler.record_failure(req, what);
  } catch (...) {  // record_failure must not throw; if it does, the key still only backs off
    log::error("recording a failed reconcile threw too", {{"controller", controller}, {"model", key}});
  }
  return Error(ErrorCode::kInternal, "reconcile threw: " + what, std::string(reconcile::kReconcileError));
}

}  // namespace

void Controller::process(const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  auto result = reconcile_guarded(reconciler_, options_.name, key);
  const auto took = std::chrono::steady_clock::now() - start;
  ++reconciles_;
  std::string outcome;
  if (result.ok()) {
    queue_.forget(key);
    if (const auto& after = result->requeue()) {
      queue_.add_after(key, *after);
      outcome = "requeue";
    } else {
      outcome = "success";
    }
    log::debug("reconciled",
               {{"controller", options_.name},
                {"model", key},
                {"result", outcome},
                {"ms", static_cast<long long>(
                           std::chrono::duration_cast<std::chrono::milliseconds>(took).count())}});
  } else {
    outcome = "error";
    int retries = queue_.retries(key);
    queue_.add_rate_limited(key);
    log::warn("reconcile failed, will retry", {{"controller", options_.name},
                                               {"model", key},
                                               {"error", result.error().to_string()},
                                               {"retries", retries}});
  }
  if (observer_) observer_->reconcile_done(options_.name, outcome, took);
}

void Controller::work() {
  while (auto key = queue_.get()) {
    process(*key);
    queue_.done(*key);
  }
}

void Controller::start() {
  if (running_.exchange(true)) return;
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers_.emplace_back([this] { work(); });
}

void Controller::stop() {
  // Shutting the queue down lets running reconciles finish and releases idle workers; keys still
  // queued are dropped (the next leader lists everything anew).
  queue_.shutdown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  running_ = false;
}

}  // namespace infergate::op::manager
