// Runs one Reconciler: a rate-limited work queue and N workers. Handlers enqueue keys at any time
// (also while this replica is not the leader, so a new leader starts with a full queue); workers run
// from start() to stop(). A stopped controller does not start again: losing leadership ends the
// process, and a restarted replica builds a new one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/reconcile/reconciler.h"
#include "infergate/operator/workqueue/work_queue.h"

namespace infergate::op::manager {

// What a Controller reports as it works (OperatorMetrics implements it for Prometheus). The runner
// stays apart from the Kubernetes client: the local platform runs the same Controller without one.
class ControllerObserver {
 public:
  virtual ~ControllerObserver() = default;
  // The observer of the work queue of the controller named `controller`; called once, at construction.
  virtual workqueue::QueueObserver& queue_observer(const std::string& controller) = 0;
  // `result`: "success", "requeue" or "error".
  virtual void reconcile_done(const std::string& controller, const std::string& result,
                              std::chrono::nanoseconds took) = 0;
};

struct ControllerOptions {
  std::string name = "inferencemodel";
  int workers = 2;
  std::chrono::milliseconds retry_base{100};
  std::chrono::milliseconds retry_max{std::chrono::minutes(5)};
};

class Controller {
 public:
  // `observer` may be null (nothing is reported).
  Controller(reconcile::Reconciler& reconciler, Clock& clock, ControllerOptions options,
             ControllerObserver* observer);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void enqueue(const std::string& key) { queue_.add(key); }
  void start();  // starts the workers (idempotent)
  void stop();   // lets running reconciles finish, then joins the workers
  workqueue::WorkQueue& queue() { return queue_; }
  const std::string& name() const { return options_.name; }
  uint64_t reconciles() const { return reconciles_.load(); }

  // One key, as a worker handles it (tests drive this directly).
  void process(const std::string& key);

 private:
  void work();
  reconcile::Reconciler& reconciler_;
  Clock& clock_;
  ControllerOptions options_;
  ControllerObserver* observer_;
  workqueue::WorkQueue queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> reconciles_{0};
};

}  // namespace infergate::op::manager
