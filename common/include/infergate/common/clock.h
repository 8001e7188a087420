// Time behind an interface, so that backoff, expiry and deadlines are tested without sleeping.
// Wall time (RFC 3339 for Kubernetes and release statements) and a monotonic clock for intervals.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate {

using WallTime = std::chrono::system_clock::time_point;
using MonoTime = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual WallTime wall_now() const = 0;
  virtual MonoTime mono_now() const = 0;
  // Sleeps (or, on a fake clock, waits until the time is advanced past the deadline).
  virtual void sleep_for(std::chrono::nanoseconds d) = 0;
};

class SystemClock final : public Clock {
 public:
  WallTime wall_now() const override { return std::chrono::system_clock::now(); }
  MonoTime mono_now() const override { return std::chrono::steady_clock::now(); }
  void sleep_for(std::chrono::nanoseconds d) override;
  // A process-wide instance.
  static SystemClock& instance();
};

// A clock that moves only when told to. Thread-safe; sleep_for blocks until advance() passes it.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(WallTime start = WallTime(std::chrono::seconds(1'800'000'000)));
  WallTime wall_now() const override;
  MonoTime mono_now() const override;
  void sleep_for(std::chrono::nanoseconds d) override;
  void advance(std::chrono::nanoseconds d);
  // How many threads are in sleep_for right now (tests wait for this to be sure a sleeper exists).
  int sleepers() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::nanoseconds offset_{0};
  WallTime wall_start_;
  int sleepers_ = 0;
};

// "2026-11-29T19:30:00Z" (seconds precision, UTC), as Kubernetes writes metav1.Time.
std::string format_rfc3339(WallTime t);
// Accepts "Z" or "+hh:mm"/"-hh:mm" offsets and optional fractional seconds.
Result<WallTime> parse_rfc3339(std::string_view text);
// "90s", "15m", "24h", "30d", "1h30m": a Go-like duration with d for days. Refuses negatives.
Result<std::chrono::seconds> parse_duration(std::string_view text);

}  // namespace infergate
