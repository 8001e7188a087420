// Condition bookkeeping.
#include "infergate/operator/api/conditions.h"

#include <algorithm>

namespace infergate::op::api {

Condition make_condition(std::string_view type, std::string_view status, std::string reason,
                         std::string message, int64_t generation) {
  return Condition{std::string(type),  std::string(status), std::move(reason),
                   std::move(message), generation,          {}};
}

bool set_condition(std::vector<Condition>& conditions, Condition c, WallTime now) {
  // Kubernetes stores metav1.Time with seconds precision; keep ours the same so that a value read
  // back compares equal to the one written.
  now = std::chrono::time_point_cast<std::chrono::seconds>(now);
  for (auto& existing : conditions) {
    if (existing.type != c.type) continue;
    bool flipped = existing.status != c.status;
    c.last_transition_time = flipped ? now : existing.last_transition_time;
    existing = std::move(c);
    return flipped;
  }
  c.last_transition_time = now;
  conditions.push_back(std::move(c));
  return true;
}

bool remove_condition(std::vector<Condition>& conditions, std::string_view type) {
  auto it = std::remove_if(conditions.begin(), conditions.end(),
                           [&](const Condition& c) { return c.type == type; });
  bool removed = it != conditions.end();
  conditions.erase(it, conditions.end());
  return removed;
}

}  // namespace infergate::op::api
