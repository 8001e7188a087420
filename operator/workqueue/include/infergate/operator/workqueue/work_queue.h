// A rate-limited work queue with client-go's semantics:
//  - a key is queued at most once however often it is added (de-duplication);
//  - a key handed out by get() is never handed out again until done(): no two workers ever hold the
//    same key; adds during processing mark it dirty and it comes back after done();
//  - add_after() delays a key; add_rate_limited() delays it by the per-key exponential backoff of its
//    rate limiter, which forget() resets after a success.
// Time comes from a Clock (tests use a FakeClock). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "infergate/common/clock.h"

namespace infergate::op::workqueue {

// How long a key waits before its next retry.
class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  virtual std::chrono::nanoseconds when(const std::string& key) = 0;
  virtual void forget(const std::string& key) = 0;
  virtual int retries(const std::string& key) = 0;
};

// base * 2^failures, capped at max; per key.
class ExponentialRateLimiter final : public RateLimiter {
 public:
  ExponentialRateLimiter(std::chrono::nanoseconds base, std::chrono::nanoseconds max)
      : base_(base), max_(max) {}
  std::chrono::nanoseconds when(const std::string& key) override;
  void forget(const std::string& key) override;
  int retries(const std::string& key) override;

 private:
  std::mutex mu_;
  std::chrono::nanoseconds base_, max_;
  std::unordered_map<std::string, int> failures_;
};

// What the queue reports (the manager exports these as Prometheus metrics).
class QueueObserver {
 public:
  virtual ~QueueObserver() = default;
  virtual void on_add() {}
  virtual void on_depth(size_t depth) { (void)depth; }
  virtual void on_wait(std::chrono::nanoseconds queued_for) { (void)queued_for; }  // add -> get
  virtual void on_work(std::chrono::nanoseconds worked_for) { (void)worked_for; }  // get -> done
  virtual void on_retry() {}
};

class WorkQueue {
 public:
  WorkQueue(Clock& clock, std::unique_ptr<RateLimiter> limiter, QueueObserver* observer = nullptr);

  void add(const std::string& key);
  void add_after(const std::string& key, std::chrono::nanoseconds delay);
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int retries(const std::string& key);

  // Blocks until a key is ready; nullopt once shut down (after the queue drained).
  std::optional<std::string> get();
  // A ready key, or nullopt, without blocking.
  std::optional<std::string> try_get();
  void done(const std::string& key);

  // No new keys are accepted; get() returns nullopt when nothing is ready.
  void shutdown();
  bool shutting_down() const;
  size_t len() const;         // ready keys
  size_t waiting() const;     // delayed keys
  size_t processing() const;  // keys held by workers
  size_t blocked() const;     // threads inside get() waiting for a key (tests wait for a worker to block)

 private:
  void add_locked(const std::string& key);
  void pump_locked(MonoTime now);
  std::optional<std::string> pop_locked();

  Clock& clock_;
  std::unique_ptr<RateLimiter> limiter_;
  QueueObserver* observer_;
  bool real_time_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::unordered_set<std::string> dirty_;
  std::unordered_set<std::string> processing_;
  std::unordered_map<std::string, MonoTime> added_at_;    // for the add -> get latency
  std::unordered_map<std::string, MonoTime> started_at_;  // for the get -> done duration
  std::multimap<MonoTime, std::string> delayed_;
  std::unordered_map<std::string, MonoTime> delayed_until_;
  bool shutdown_ = false;
  size_t blocked_ = 0;
};

}  // namespace infergate::op::workqueue
