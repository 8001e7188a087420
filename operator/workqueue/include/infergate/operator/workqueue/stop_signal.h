// A stop flag that loops can also sleep on: wait_for() returns early when stop() is called. Time is
// measured with a Clock, so loops driven by a FakeClock move when the test advances it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "infergate/common/clock.h"

namespace infergate::op::workqueue {

class StopSignal {
 public:
  void stop();
  bool stopped() const { return stopped_.load(); }
  // Waits until `clock` has moved on by `d` (true) or stop() was called (false). With the system
  // clock this is one condition-variable wait; with any other clock it polls the clock every
  // millisecond of real time, so a FakeClock advanced by a test wakes it promptly.
  bool wait_for(Clock& clock, std::chrono::nanoseconds d);
  // Threads inside wait_for right now (tests wait for a waiter before they move a fake clock).
  int waiters() const;

 private:
  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;
  int waiters_ = 0;
  std::condition_variable cv_;
};

// True for the process's real clock (waits can block on it directly).
bool is_real_clock(const Clock& clock);

}  // namespace infergate::op::workqueue
