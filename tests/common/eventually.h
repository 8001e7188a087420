// Waiting in tests for something another thread or process does: poll a condition until it holds or
// a real-time limit passes. The one copy every suite uses (tests that can run on a fake clock do so
// instead; this is for real processes, servers and threads).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

namespace infergate::testing {

// Polls `pred` until it holds or `limit` of real time passes, and returns whether it held; `pred` is
// asked once more at the deadline, so a condition that became true while the last poll slept counts.
// Polls every millisecond at first and backs off to every 50 ms: a condition that holds soon is seen
// at once, and one that waits on a process to start costs little CPU while it waits.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::chrono::milliseconds pause(1);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace infergate::testing
