// The watcher: list-then-watch as an explicit state machine (kube-rs' watcher). One step() call does
// one thing and reports it:
//   Empty       --list (all pages)-->                      Restarted(all objects)     -> InitListed(rv)
//   InitListed  --open a watch from rv-->                  (nothing)                  -> Watching
//   Watching    --event-->                                 Applied / Deleted          -> Watching(rv')
//               --bookmark-->                              (nothing, rv advances)     -> Watching(rv')
//               --410 Gone (ERROR event or on open)-->     error Expired              -> Empty (re-list)
//               --stream ended by the server-->            (nothing)                  -> InitListed(rv)
//               --connection broke-->                      error WatchFailed          -> InitListed(rv)
// A re-list replaces the whole view in one Restarted event, so objects deleted while the watch was
// down are noticed: no event is lost. Errors are typed by the step that failed (reason words
// ListFailed, WatchStartFailed, WatchFailed, Expired); the caller decides how long to back off.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infergate/operator/client/client.h"

namespace infergate::op::cache {

struct WatcherConfig {
  std::string namespace_;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  std::chrono::seconds watch_timeout{300};
};

struct WatcherEvent {
  enum class Type { kApplied, kDeleted, kRestarted };
  Type type;
  std::vector<Json> objects;  // one object, or the whole list for kRestarted
};

class Watcher {
 public:
  enum class State { kEmpty, kInitListed, kWatching };

  Watcher(client::Client& client, client::ResourceKind kind, WatcherConfig config);

  // Advances by one step. nullopt: a step that produced no event (watch opened, bookmark, stream end).
  Result<std::optional<WatcherEvent>> step();
  // Cancels the open watch stream (from another thread); the current step() returns Cancelled.
  void cancel();

  State state() const { return state_; }
  std::string resource_version() const;
  const client::ResourceKind& kind() const { return kind_; }

 private:
  client::Client& client_;
  client::ResourceKind kind_;
  WatcherConfig config_;
  State state_ = State::kEmpty;
  mutable std::mutex mu_;  // guards rv_ and stream_ against cancel()/resource_version()
  std::string rv_;
  std::shared_ptr<client::WatchStream> stream_;
  std::atomic<bool> cancelled_{false};
};

std::string_view to_string(Watcher::State s);

}  // namespace infergate::op::cache
