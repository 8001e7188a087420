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
  ++waiters_;
  bool elapsed = false;
  if (is_real_clock(clock)) {
    elapsed = !cv_.wait_for(lock, d, [&] { return stopped_.load(); });
  } else {
    const MonoTime deadline = clock.mono_now() + std::chrono::duration_cast<MonoTime::duration>(d);
    while (!stopped_ && !elapsed) {
      elapsed = clock.mono_now() >= deadline;
      if (!elapsed) cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
  --waiters_;
  return elapsed;
}

int StopSignal::waiters() const {
  std::lock_guard lock(mu_);
  return waiters_;
}

}  // namespace infergate::op::workqueue
