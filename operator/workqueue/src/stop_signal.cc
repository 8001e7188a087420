// StopSignal.
#include "infergate/operator/workqueue/stop_signal.h"

#include <algorithm>

namespace infergate::op::workqueue {

bool is_real_clock(const Clock& clock) { return dynamic_cast<const SystemClock*>(&clock) != nullptr; }

void StopSignal::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool StopSignal::wait_for(Clock& clock, std::chrono::nanoseconds d) {
  std::unique_lock lock(mu_);
  if (is_real_clock(clock)) {
    return !cv_.wait_for(lock, d, [&] { return stopped_.load(); });
  }
  const MonoTime deadline = clock.mono_now() + std::chrono::duration_cast<MonoTime::duration>(d);
  while (!stopped_) {
    if (clock.mono_now() >= deadline) return true;
    cv_.wait_for(lock, std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace infergate::op::workqueue
