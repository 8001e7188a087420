// An informer: a watcher driven in its own thread, a store kept in step with it, and handlers told
// about every add, update and delete (a re-list is turned into the adds, updates and deletes it
// implies). Errors back off exponentially with jitter (no hot loop while the API server is down);
// 410 Gone re-lists at once. Optionally re-delivers every object every resync period.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/cache/store.h"
#include "infergate/operator/cache/watcher.h"
#include "infergate/operator/workqueue/stop_signal.h"

namespace infergate::op::cache {

struct EventHandler {
  std::function<void(const Json& obj)> on_add;
  std::function<void(const Json& old_obj, const Json& new_obj)> on_update;
  std::function<void(const Json& obj)> on_delete;
};

struct InformerConfig {
  WatcherConfig watcher;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  std::chrono::nanoseconds resync_period{std::chrono::minutes(10)};  // 0: never
  // Applied to every object before it is stored; by default managedFields are dropped (memory).
  std::function<void(Json&)> transform;
};

// What an informer reports (the manager exports these as metrics).
struct InformerStats {
  uint64_t relists = 0;
  uint64_t watch_restarts = 0;
  uint64_t expired = 0;  // 410 Gone
  uint64_t errors = 0;
  uint64_t events = 0;
  // Waiting out a backoff after a failed list or watch (true from just before the wait starts until
  // it ends): the informer is not in contact with the API server.
  bool backing_off = false;
};

class Informer {
 public:
  Informer(client::Client& client, client::ResourceKind kind, InformerConfig config, Clock& clock);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Handlers run on the informer's thread, in event order; add them before start().
  void add_handler(EventHandler handler);
  Store& store() { return store_; }
  const Store& store() const { return store_; }
  const client::ResourceKind& kind() const { return kind_; }
  // The namespace it watches ("" = all).
  const std::string& watched_namespace() const { return config_.watcher.namespace_; }

  void start();  // runs the loop (and the resync loop) in background threads
  void stop();   // stops and joins; safe to call twice
  bool has_synced() const { return synced_.load(); }
  InformerStats stats() const;

  // One iteration of the loop, for tests that drive the informer by hand: a watcher step, applied to
  // the store and dispatched. Returns the step's error, if any (without backing off).
  Status step();

 private:
  void run();
  void set_backing_off(bool on);
  void resync_loop();
  void apply(WatcherEvent ev);

  client::ResourceKind kind_;
  InformerConfig config_;
  Clock& clock_;
  Watcher watcher_;
  Store store_;
  std::vector<EventHandler> handlers_;
  std::atomic<bool> synced_{false};
  workqueue::StopSignal stop_;
  std::thread thread_, resync_thread_;
  mutable std::mutex stats_mu_;
  InformerStats stats_;
  std::mutex dispatch_mu_;  // the watch loop and the resync loop never dispatch at the same time
};

// The default transform: drops metadata.managedFields.
void strip_managed_fields(Json& obj);

}  // namespace infergate::op::cache
