// How often a serving container restarts now, not how often it ever did: the reconciler keeps, per
// pod, when its restarts happened (from the restart counts it observes and the container's last
// termination time) and counts those within a sliding window, so a crash loop is judged on restarts
// within the window. A pod that restarted five times over a week is not crash-looping; one that
// restarted three times in the last ten minutes is (the kubelet's back-off of 10 s, 20 s, 40 s, ...
// gets a container that dies on start there in about a minute).
//
// Guarantees: never over-counts. A restart is placed at its container's termination time when the
// platform reports it, and otherwise at the earliest moment it can have happened (the previous
// observation, or the pod's start), so restarts of unknown time count only when that moment is in the
// window. After an operator restart the counts start from what the pods report then.
// Thread-safe (the reconciler's workers share one history). Memory: one record per pod seen within the
// window; forget() drops a deleted model's.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "infergate/common/clock.h"
#include "infergate/operator/platform/platform.h"

namespace infergate::op::controllers {

inline constexpr std::chrono::minutes kCrashLoopWindow{10};
// Restarts within kCrashLoopWindow that make a crash loop (pod_trouble.h).
inline constexpr int kCrashLoopRestarts = 3;

class RestartHistory {
 public:
  explicit RestartHistory(std::chrono::seconds window = kCrashLoopWindow) : window_(window) {}

  // Records what `workload`'s pods report at `now` and sets each pod's recent_restarts.
  void observe(const std::string& model_key, platform::WorkloadState& workload, WallTime now);
  void forget(const std::string& model_key);

 private:
  struct PodRecord {
    int restarts = 0;         // the restart count last observed
    WallTime seen{};          // when
    std::deque<WallTime> at;  // when restarts happened, oldest first, within the window
  };
  void prune(PodRecord& r, WallTime now) const;

  std::chrono::seconds window_;
  std::mutex mu_;
  std::map<std::string, std::map<std::string, PodRecord>> models_;  // model key -> pod name -> record
};

}  // namespace infergate::op::controllers
