// Restarts within a window, per pod.
#include "infergate/operator/controllers/restart_history.h"

#include <algorithm>

namespace infergate::op::controllers {

void RestartHistory::prune(PodRecord& r, WallTime now) const {
  while (!r.at.empty() && r.at.front() <= now - window_) r.at.pop_front();
}

void RestartHistory::observe(const std::string& model_key, platform::WorkloadState& workload, WallTime now) {
  std::lock_guard lock(mu_);
  auto& pods = models_[model_key];
  for (auto& p : workload.pods) {
    auto it = pods.find(p.name);
    const bool fresh = it == pods.end() || p.restarts < it->second.restarts;  // new, or made again
    PodRecord& r = pods[p.name];
    // The earliest the restarts since the last look can have happened; nullopt: unknown.
    std::optional<WallTime> since;
    int added = p.restarts;
    if (fresh) {
      r = PodRecord{};
      since = p.started_at;
    } else {
      since = r.seen;
      added = p.restarts - r.restarts;
    }
    if (added > 0) {
      // The latest one ended the previous container: at its termination time when known.
      std::optional<WallTime> last = p.last_terminated_at;
      if (last && *last > now) last = now;  // a node clock ahead of ours
      if (!last) last = since;              // somewhere between `since` and now: count it at `since`
      if (since && last && *since > *last) since = last;
      for (int i = 0; i < added - 1; ++i) {
        if (since) r.at.push_back(*since);
      }
      if (last) r.at.push_back(*last);
      std::sort(r.at.begin(), r.at.end());
    }
    r.restarts = p.restarts;
    r.seen = now;
    prune(r, now);
    p.recent_restarts = static_cast<int>(r.at.size());
  }
  // Pods not seen for a whole window are gone (or were made again under another name).
  for (auto it = pods.begin(); it != pods.end();) {
    if (it->second.seen <= now - window_) {
      it = pods.erase(it);
    } else {
      ++it;
    }
  }
}

void RestartHistory::forget(const std::string& model_key) {
  std::lock_guard lock(mu_);
  models_.erase(model_key);
}

}  // namespace infergate::op::controllers
